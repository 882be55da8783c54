"""An episode's observation: the tokens of the new messages after a sampled turn, within
``rollout.multi_turn.max_observation_tokens`` (:mod:`.episodes`).

The messages' text is shortened (``right``: keep the start, ``left``: keep the end) until the
rendered observation fits; the template's own tokens and an image's tokens are never cut, so
messages that do not fit with no text at all give None (the episode ends, truncated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..agents.images import image_free
from ..agents.templating import rendered_suffix, rendered_tail
from .episode_images import image_observation_ids

__all__ = ["ObservationRendering", "observation"]


@dataclass(frozen=True)
class ObservationRendering:
    """What renders and bounds every observation of a rollout, built once per rollout: the chat
    template's tokenizer, the agent (its tools' schemas and template kwargs), the turn limits
    (``max_observation_tokens``, ``observation_truncation``), the texts that end a turn, the
    multi-turn mode and a vision-language policy's processor (None: text only)."""

    tokenizer: Any
    agent: Any
    limits: Any  # episodes.TurnLimits
    end_texts: list[str]
    mode: str = "single"
    processor: Any = None


def _observation_text(r: ObservationRendering, e, assistant: dict, messages: list[dict]) -> str:
    """The observation's text as the template renders it after ``assistant`` (its tail in step-wise modes)."""
    tools, kwargs, history = r.agent.tool_schemas, r.agent.template_kwargs, e.history or []
    if r.mode == "single":
        roles = "/".join(sorted({str(m.get("role")) for m in messages}))
        return rendered_suffix(r.tokenizer, history, assistant, messages, tools, r.end_texts,
                               f"the next {roles} message(s)", kwargs, e.end)
    return rendered_tail(r.tokenizer, history, assistant, messages, tools, r.end_texts, kwargs, e.end)


def observation(r: ObservationRendering, e, assistant: dict, messages: list[dict],
                images: list = ()) -> tuple[list[int] | None, dict | None]:
    """The observation's token ids and its images' inputs (None: no image), its messages' text
    shortened until it fits the limit; ids None when even no text does not fit (the template's
    tokens and the images' are never cut)."""
    from ..agents.chat import observation_ids, observation_tail_ids

    render_ids = observation_ids if r.mode == "single" else observation_tail_ids
    kwargs = {"tools": r.agent.tool_schemas, "end_texts": r.end_texts, "template_kwargs": r.agent.template_kwargs,
              "end": e.end}

    def ids_of(msgs):
        if images:
            return image_observation_ids(r.processor, _observation_text(r, e, assistant, msgs), images)
        return render_ids(r.tokenizer, e.history or [], assistant, msgs, **kwargs), None

    ids, chunk = ids_of(messages)
    limit, tokenizer = r.limits.max_observation_tokens, r.tokenizer
    if len(ids) <= limit:
        return ids, chunk
    overhead = len(ids_of([image_free(m) for m in messages])[0])
    if overhead > limit:
        return None, None
    room = (limit - overhead) // len(messages)
    while True:  # a rendering may take more tokens than its contents (escapes, merges): shorten again
        shortened = [_shortened(tokenizer, m, room, r.limits.observation_truncation) for m in messages]
        ids, chunk = ids_of(shortened)
        if len(ids) <= limit or room == 0:  # empty contents render as the overhead, which fits
            break
        room = max(room - max(-(-(len(ids) - limit) // len(messages)), 1), 0)
    messages[:] = shortened  # the transcript shows what the policy saw
    return ids, chunk


def _shortened(tokenizer, message: dict, tokens: int, side: str) -> dict:
    """``message`` with its text cut to ``tokens`` (a list's text parts share them; images kept)."""
    content = message.get("content")
    if not isinstance(content, list):
        return {**message, "content": _shorten(tokenizer, str(content or ""), tokens, side)}
    texts = [p for p in content if isinstance(p, dict) and p.get("type") == "text"]
    each = tokens // max(len(texts), 1)
    return {**message, "content": [{**p, "text": _shorten(tokenizer, str(p.get("text") or ""), each, side)}
                                   if p in texts else p for p in content]}


def _shorten(tokenizer, text: str, tokens: int, side: str) -> str:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) <= tokens:
        return text
    kept = ids[:tokens] if side == "right" else ids[len(ids) - tokens:]
    return tokenizer.decode(kept, skip_special_tokens=False)
