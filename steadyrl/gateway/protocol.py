"""The OpenAI wire format the gateway speaks: requests checked into plain objects, and the bodies
of its answers (``chat.completion``, ``text_completion`` and errors).

Accepted: ``messages`` (chat) or ``prompt`` (a string or a list of token ids), ``tools``,
``tool_choice`` (``auto`` / ``none``), ``n``, ``temperature``, ``top_p``, ``max_tokens`` (or
``max_completion_tokens``), ``stop`` (a string or up to 4), ``logprobs`` (chat: true/false;
completions: an int, the count of top log-probs, of which only the sampled token's is given) and
steadyrl's ``return_token_ids`` (vLLM's name: the prompt and sampled ids come back). Other keys
(``model``, ``user``, ``seed``, ...) are ignored. Refused with a 400 that says so: ``stream: true``,
a ``tool_choice`` that forces a tool, ``n`` < 1, values of the wrong type.

A chat message's content may hold OpenAI ``image_url`` parts (``{"type": "image_url", "image_url":
{"url": "data:image/png;base64,..."}}``): each is decoded and checked here, in the handler thread
(:func:`steadyrl.agents.images.split_images`: data URLs only, no network; size, base64, pixel
limits), and a bad one is a 400 (``param``: ``messages``) whose message names the field
(``messages[2].content[1].image_url.url``). The
request keeps the images (``Request.images``, in order) and the messages with ``{"type": "image"}``
parts, which a vision-language policy's processor renders and expands into the images' tokens
(:mod:`.waves`); a text policy refuses them with a 400.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from ..agents.images import MAX_IMAGES_PER_EPISODE, ImageContentError, is_image_part, split_images

MAX_N = 64
"""Most choices one request may ask for."""
MAX_STOPS = 4
"""Most stop sequences of one request (OpenAI's limit)."""


class RequestError(Exception):
    """A request the gateway refuses: the HTTP status, the message and the parameter at fault."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.param, self.kind = status, param, kind


@dataclass
class Request:
    """One call, checked. ``messages`` for chat, else ``prompt`` (text) or ``prompt_ids``."""

    chat: bool
    messages: list[dict] | None = None
    prompt: str | None = None
    prompt_ids: list[int] | None = None
    tools: list[dict] | None = None
    parse_tools: bool = False
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    logprobs: bool = False
    return_token_ids: bool = False
    images: list = field(default_factory=list)  # chat: the messages' images (PIL), in order of appearance


def _number(body: dict, key: str, lo: float, hi: float):
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise RequestError(f"{key} = {value!r}: expected a number in [{lo}, {hi}]", param=key)
    return value


def _int(body: dict, key: str, lo: int, hi: int):
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise RequestError(f"{key} = {value!r}: expected an integer in [{lo}, {hi}]", param=key)
    return value


def text_of(content) -> str:
    """A message's content as text: a string, None (empty) or OpenAI's list of ``text`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise RequestError("a message's content must be a string or a list of text and image_url parts (audio is "
                       "not supported by the steadyrl gateway)", param="messages")


def _arguments(value):
    """Tool-call arguments as the chat templates expect them: a JSON object (OpenAI sends a string)."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            return value
        return parsed if isinstance(parsed, dict) else value
    return value


def message_for_template(message) -> dict:
    """An OpenAI message as the chat template renders it: text content, arguments as objects."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise RequestError(f"every message must be an object with a 'role'; got {str(message)[:80]!r}",
                           param="messages")
    out = {k: v for k, v in message.items() if v is not None}
    content = message.get("content")
    if isinstance(content, list) and any(is_image_part(p) for p in content):  # images: split_images reads them
        if not all(is_image_part(p) or isinstance(p, dict) and p.get("type") == "text" for p in content):
            text_of(content)  # the refusal of other parts
        out["content"] = [p if is_image_part(p) else {"type": "text", "text": str(p.get("text", ""))} for p in content]
        return out
    out["content"] = text_of(content)
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise RequestError("tool_calls must be a list", param="messages")
        out["tool_calls"] = [{**c, "function": {**c.get("function", {}),
                                                "arguments": _arguments(c.get("function", {}).get("arguments"))}}
                             for c in calls if isinstance(c, dict)]
    return out


def _images(messages: list[dict]) -> tuple[list[dict], list]:
    """The messages with ``{"type": "image"}`` parts and their decoded images; a bad image is a 400
    naming its field."""
    try:
        return split_images(messages, "messages", limit=MAX_IMAGES_PER_EPISODE)
    except ImageContentError as err:  # the message names the field, messages[i].content[j].image_url.url
        raise RequestError(str(err), param="messages") from None


def _stops(value) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOPS:
        raise RequestError(f"stop = {value!r}: expected a non-empty string or a list of at most {MAX_STOPS}",
                           param="stop")
    return list(stops)


def parse_request(body, chat: bool) -> Request:
    """The checked request of ``body`` (the decoded JSON) for ``/v1/chat/completions`` (``chat``)
    or ``/v1/completions``."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if body.get("stream"):
        raise RequestError("stream = true: the steadyrl gateway does not stream; call it with stream=False "
                           "(the whole completion comes back at once)", param="stream")
    req = Request(chat=chat, n=_int(body, "n", 1, MAX_N) or 1, temperature=_number(body, "temperature", 0, 2),
                  top_p=_number(body, "top_p", 0, 1), stop=_stops(body.get("stop")),
                  return_token_ids=bool(body.get("return_token_ids")))
    if req.top_p == 0:
        raise RequestError("top_p = 0: expected a number in (0, 1]", param="top_p")
    req.max_tokens = _int(body, "max_tokens", 1, 2**31) or _int(body, "max_completion_tokens", 1, 2**31)
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty list of messages", param="messages")
        req.messages, req.images = _images([message_for_template(m) for m in messages])
        req.logprobs = bool(body.get("logprobs"))
        tools = body.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
            raise RequestError("tools must be a list of tool objects", param="tools")
        choice = body.get("tool_choice", "auto")
        if choice not in ("auto", "none", None):
            raise RequestError(f"tool_choice = {choice!r}: the gateway samples the policy as it is; only 'auto' and "
                               "'none' are supported", param="tool_choice")
        req.tools = tools or None
        req.parse_tools = bool(tools) and choice != "none"
        return req
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        req.prompt = prompt
    elif isinstance(prompt, list) and prompt and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                     for i in prompt):
        req.prompt_ids = list(prompt)
    else:
        raise RequestError("prompt must be a non-empty string or a list of token ids (one prompt per request)",
                           param="prompt")
    req.logprobs = body.get("logprobs") is not None and body.get("logprobs") is not False
    return req


@dataclass
class Choice:
    """One sampled completion as the gateway answers it."""

    text: str  # the sampled text (stop sequence excluded)
    ids: list[int]
    logprobs: list[float]
    finish_reason: str  # stop, length, tool_calls
    token_texts: list[str] = field(default_factory=list)
    content: str | None = None  # chat: the text outside tool calls
    tool_calls: list[dict] | None = None


def error_body(err: RequestError) -> dict:
    return {"error": {"message": str(err), "type": err.kind, "param": err.param, "code": None}}


def _usage(prompt_tokens: int, choices: list[Choice]) -> dict:
    completion = sum(len(c.ids) for c in choices)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}


def chat_body(req: Request, prompt_ids: list[int], choices: list[Choice], model: str) -> dict:
    out = []
    for i, c in enumerate(choices):
        message = {"role": "assistant", "content": c.content if c.content is not None else c.text}
        if c.tool_calls:
            message["tool_calls"] = c.tool_calls
        logprobs = None
        if req.logprobs:
            logprobs = {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                                    for t, lp in zip(c.token_texts, c.logprobs)]}
        choice = {"index": i, "message": message, "finish_reason": c.finish_reason, "logprobs": logprobs}
        if req.return_token_ids:
            choice["token_ids"] = list(c.ids)
        out.append(choice)
    return _body("chatcmpl", "chat.completion", req, prompt_ids, choices, out, model)


def completion_body(req: Request, prompt_ids: list[int], choices: list[Choice], model: str) -> dict:
    out = []
    for i, c in enumerate(choices):
        logprobs = None
        if req.logprobs:
            offsets, pos = [], 0
            for t in c.token_texts:
                offsets.append(pos)
                pos += len(t)
            logprobs = {"tokens": c.token_texts, "token_logprobs": c.logprobs, "top_logprobs": None,
                        "text_offset": offsets}
        choice = {"index": i, "text": c.text, "finish_reason": c.finish_reason, "logprobs": logprobs}
        if req.return_token_ids:
            choice["token_ids"] = list(c.ids)
        out.append(choice)
    return _body("cmpl", "text_completion", req, prompt_ids, choices, out, model)


def _body(prefix: str, kind: str, req: Request, prompt_ids: list[int], choices: list[Choice], out: list[dict],
          model: str) -> dict:
    """The response object around its ``choices`` (vLLM's ``prompt_token_ids`` when asked for)."""
    body = {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
            "model": model, "choices": out, "usage": _usage(len(prompt_ids), choices)}
    if req.return_token_ids:
        body["prompt_token_ids"] = list(prompt_ids)
    return body
