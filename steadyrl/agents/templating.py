"""The chat-template helpers the multi-turn modules share (:mod:`.chat`, :mod:`.probe`, :mod:`.modes`,
:mod:`.turns`, :mod:`.messages`): rendering, its errors, where a turn ends in a rendering, what
follows it, and the probes' scripted conversation. One public module, so that the modules that
use them import public names from one place rather than each other's private ones.
"""

from __future__ import annotations

import json
import os
import re

from .messages import assistant_message, call_id, id_style, text_message, tool_message
from .rendering import (  # noqa: F401 - re-exported: the modules that use them read them from here too
    HISTORY_CLOSERS,
    TemplateDriftError,
    TemplateError,
    render,
    require_template,
    template_name,
)

__all__ = ["CONTEXT_CHARS", "PROBE_MARKER", "HISTORY_CLOSERS", "TemplateError", "TemplateDriftError",
           "template_name", "require_template", "render", "first_difference", "drift_error", "find_closer",
           "next_role_token", "as_message", "rendered_suffix", "rendered_tail", "tool_names",
           "example_arguments", "is_harmony", "thinks", "scripted_turns", "role_closer", "loaded_arguments",
           "kept_message", "check_renders", "check_stops", "HARMONY_STOPS"]


CONTEXT_CHARS = 40
"""Characters shown on each side of the first difference in a drift error."""


PROBE_MARKER = "steadyrl-probe-7c1e"
"""A string no template writes by itself: the probes look for it in the rendering."""


def first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def drift_error(tokenizer, base: str, full: str, what: str) -> TemplateDriftError:
    i = first_difference(base, full)
    lo, hi = max(0, i - CONTEXT_CHARS), i + CONTEXT_CHARS
    dropped = (base.count("</think>") > full[:len(base)].count("</think>")
               or any(b.strip() and b not in full for b in re.findall(r"<think>(.*?)</think>", base, re.S)))
    return TemplateDriftError(
        f"the chat template of {template_name(tokenizer)!r} renders the conversation differently once {what} is "
        f"added{' (it re-renders earlier assistant turns: it drops their <think> blocks)' if dropped else ''} "
        f"(it is not a prefix of the longer rendering), so the observation tokens cannot be appended "
        f"to the sampled ones; first difference at character {i}: before {base[lo:hi]!r}, "
        f"after {full[lo:hi]!r}")


def find_closer(base: str, start: int, end_texts: list[str]) -> tuple[int, str] | None:
    """The first end-of-turn text in ``base`` at or after ``start``: (its end position, the text)."""
    found = [(base.find(t, start), t) for t in end_texts if t and base.find(t, start) != -1]
    if not found:
        return None
    pos, text = min(found, key=lambda x: (x[0], -len(x[1])))
    return pos + len(text), text


def next_role_token(base: str, full: str, end_texts: list[str]) -> tuple[int, str] | None:
    """For templates that write no closer, the turn ends where the next message's role token starts
    (GLM's ``<|observation|>`` / ``<|user|>``, which stop its generation): ``full`` extends ``base`` with it."""
    if not full.startswith(base):
        return None
    found = [t for t in end_texts if t and full.startswith(t, len(base))]
    return (len(base) + len(max(found, key=len)), max(found, key=len)) if found else None


def as_message(assistant) -> dict:
    return assistant if isinstance(assistant, dict) else {"role": "assistant", "content": assistant}


def rendered_suffix(tokenizer, history, assistant, new_messages, tools, end_texts, what, kwargs, end=None) -> str:
    """The text after the sampled turn's end token in the template's rendering with ``new_messages``
    and a generation prompt (see the module docstring)."""
    turns = list(history) + [as_message(assistant)]
    for attempt in range(2):  # a second try: a date header may change between the renders
        head = render(tokenizer, list(history), tools=tools, add_generation_prompt=True,
                      purpose="the conversation before the sampled turn", template_kwargs=kwargs)
        base = render(tokenizer, turns, tools=tools, add_generation_prompt=False,
                      purpose="the conversation up to the sampled turn", template_kwargs=kwargs)
        full = render(tokenizer, turns + list(new_messages), tools=tools, add_generation_prompt=True,
                      purpose=f"the conversation with {what}", template_kwargs=kwargs)
        if not base.startswith(head):
            if attempt:
                raise drift_error(tokenizer, head, base, "the sampled turn")
            continue
        closer = find_closer(base, len(head), end_texts) or next_role_token(base, full, end_texts)
        if closer is None and not full.startswith(base) and attempt:
            raise drift_error(tokenizer, base, full, what)
        if closer is None and not full.startswith(base):
            continue
        if closer is None:
            raise TemplateError(
                f"the chat template of {template_name(tokenizer)!r} does not close an assistant turn with any of the "
                f"end-of-turn texts {end_texts} (the tokens that stop generation); rendered turn ends with "
                f"{base[-CONTEXT_CHARS:]!r}")
        stop, text = closer
        if end is not None and text != end and stop > len(base):  # the stop is the next message's role token
            raise TemplateError(
                f"the policy ended its turn with {end!r} where the chat template of "
                f"{template_name(tokenizer)!r} writes "
                f"{text!r}, the role of the next message: that message cannot follow the token the policy sampled")
        turn = base[:stop] if stop <= len(base) else base + text
        if full.startswith(turn):
            return full[stop:]
    raise drift_error(tokenizer, turn, full, what)


def rendered_tail(tokenizer, history, assistant, new_messages, tools, end_texts, kwargs, end) -> str:
    """The text after the sampled turn's end token in the template's rendering of the conversation
    with ``new_messages`` and a generation prompt, found in that rendering alone: the last end-of-turn
    text before the first new message's content (located with marker contents). Earlier turns may
    render differently from how they were sampled (a thinking template drops their reasoning): only
    what follows the turn is taken, so this is the observation of the as-sampled and step-wise modes."""
    turns = list(history) + [as_message(assistant)] + list(new_messages)
    for attempt in range(2):  # a second try: a date header may change between the renders
        full = render(tokenizer, turns, tools=tools, add_generation_prompt=True,
                      purpose="the conversation with the observation", template_kwargs=kwargs)
        marked = render(tokenizer, turns[:len(turns) - len(new_messages)] + [
            {**m, "content": f"{PROBE_MARKER}-{i}"} for i, m in enumerate(new_messages)], tools=tools,
            add_generation_prompt=True, purpose="the conversation with the observation", template_kwargs=kwargs)
        at = marked.find(f"{PROBE_MARKER}-0")
        if at < 0:
            raise TemplateError(f"the chat template of {template_name(tokenizer)!r} does not show the content of a "
                                f"{new_messages[0].get('role')!r} message after an assistant turn")
        if full[:at] != marked[:at]:
            if attempt:
                raise TemplateError(f"the chat template of {template_name(tokenizer)!r} renders the conversation "
                                    f"before an "
                                    f"observation differently depending on the observation's content")
            continue
        closers = list(end_texts) + [HISTORY_CLOSERS[t] for t in end_texts if t in HISTORY_CLOSERS]
        found = [(full.rfind(t, 0, at), t) for t in closers if t and full.rfind(t, 0, at) != -1]
        if not found:
            raise TemplateError(
                f"the chat template of {template_name(tokenizer)!r} does not close an assistant turn with any of the "
                f"end-of-turn texts {end_texts} (the tokens that stop generation) before the next message")
        pos, text = max(found, key=lambda x: (x[0] + len(x[1]), len(x[1])))
        if end is not None and text not in (end, HISTORY_CLOSERS.get(end)):
            raise TemplateError(
                f"the policy ended its turn with {end!r} where the chat template of "
                f"{template_name(tokenizer)!r} writes "
                f"{text!r} before the next message: that message cannot follow the token the policy sampled")
        return full[pos + len(text):]
    raise AssertionError("unreachable")


def tool_names(tools: list[dict]) -> list[str]:
    return [t.get("function", t).get("name", "") for t in tools]


def example_arguments(tool: dict) -> dict:
    """Arguments that fit ``tool``'s JSON schema (one per property: 1, "x", true, [], {})."""
    props = tool.get("function", tool).get("parameters", {}).get("properties", {}) or {}
    values = {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    return {k: values.get((v or {}).get("type"), "x") for k, v in list(props.items())[:2]}


def is_harmony(tokenizer) -> bool:
    return "<|channel|>analysis" in (tokenizer.chat_template or "")


HARMONY_STOPS = ("<|return|>", "<|call|>")
"""What ends a Harmony (gpt-oss) turn: its final answer's ``<|return|>``, a call's ``<|call|>``."""


def check_stops(tokenizer, end_texts: list[str]) -> None:
    """A Harmony template's turn cannot end at ``<|end|>``: it closes the analysis channel *inside*
    the turn, so a model stopped there never writes its final answer or its call."""
    if is_harmony(tokenizer) and "<|end|>" in end_texts:
        raise TemplateError(
            f"the chat template of {template_name(tokenizer)!r} is Harmony's (gpt-oss), whose turns end with "
            f"{' or '.join(HARMONY_STOPS)}; the tokens that stop generation {end_texts} include '<|end|>', which "
            f"ends the analysis channel before the answer: take it out of eos_token_id in generation_config.json")


def thinks(tokenizer, prompt_tail: str) -> bool:
    """The model writes reasoning: a thinking template whose generation prompt does not close it, one
    whose generation prompt opens a reasoning block (Cohere2's ``<|START_THINKING|>``), or a Harmony
    template (gpt-oss writes its analysis channel first)."""
    return (is_harmony(tokenizer) or "</think>" in (tokenizer.chat_template or "") and "</think>" not in prompt_tail
            or prompt_tail.rstrip().endswith(REASONING_OPENERS))


REASONING_OPENERS = ("<|START_THINKING|>",)
"""Generation prompts that open a reasoning block a template fills from ``reasoning_content``."""


def scripted_turns(tokenizer, tools, observation_role: str, style: str) -> list[tuple[dict, list[dict]]]:
    """Three turns: (assistant message, the messages that follow it)."""
    if observation_role == "tool" and tools:
        name, args = tool_names(tools)[0], example_arguments(tools[0])
        turns = []
        for i in range(2):
            cid = call_id(style, name, i)
            message = {"role": "assistant", "content": "", "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}
            turns.append((message, [tool_message(name, f"{PROBE_MARKER}-{i}", cid)]))
    else:
        turns = [({"role": "assistant", "content": f"a{i}"},
                  [{"role": observation_role, "content": f"{PROBE_MARKER}-{i}"}]) for i in range(2)]
    return turns + [({"role": "assistant", "content": "The answer is 9."}, [])]


def role_closer(tokenizer, history, message, new, tools, end_texts, kwargs):
    """The next message's role token that ends ``message`` in a template that writes no closer (GLM),
    looked up after the first message alone and without the turn's reasoning (a template may drop
    reasoning once a message follows: that is found elsewhere, not here)."""
    plain = {k: v for k, v in message.items() if k != "reasoning_content"}
    plain["content"] = (message.get("content") or "").split("</think>")[-1].lstrip("\n")
    base = render(tokenizer, history[:1] + [plain], tools=tools, add_generation_prompt=False, template_kwargs=kwargs)
    full = render(tokenizer, history[:1] + [plain] + (new or [{"role": "user", "content": "ok"}]), tools=tools,
                  add_generation_prompt=False, template_kwargs=kwargs)
    found = next_role_token(base, full, end_texts) or _role_after_turn(base, full, end_texts)
    return None if found is None else (len(render(tokenizer, history + [message], tools=tools,
                                                  add_generation_prompt=False, template_kwargs=kwargs))
                                       + len(found[1]), found[1])


def _role_after_turn(base: str, full: str, end_texts: list[str]):
    """The role token that ends the last turn of ``base`` in ``full`` (the same conversation with a
    message after it) when the turn renders otherwise once a message follows (GLM-5.1 writes an
    empty ``<think></think>`` in the last turn, ``</think>`` alone in earlier ones): the first
    end-of-turn text in ``full`` after the two renderings part, where the text before it ends as the
    last turn's rendering does (at least its last 8 characters, or all of it): ``(index, token)`` or None."""
    at = len(os.path.commonprefix([base, full]))
    tail = base[at:]
    hits = [(full.find(t, at), t) for t in end_texts if t and full.find(t, at) != -1]
    if not tail or not hits:
        return None
    pos, token = min(hits, key=lambda h: (h[0], -len(h[1])))
    before = full[at:pos]
    same = len(os.path.commonprefix([before[::-1], tail[::-1]]))
    return (pos + len(token), token) if same >= min(len(tail), 8) else None


def loaded_arguments(arguments):
    """A call's arguments as an object (OpenAI's string form read as JSON)."""
    return json.loads(arguments) if isinstance(arguments, str) else arguments


def kept_message(message: dict, sampled: str, parser, style: str, index: int, strict: bool,
                 template: str | None = None) -> dict:
    """The assistant message the rollout keeps for a sampled turn: the parser's reading of the text
    (tool use), else the text itself (an environment's episode). A parser that does not read the
    call back is an error when it is the run's (``strict``); the template's own is only a guess, and
    then the scripted call stands, beside the reasoning the model wrote."""
    if parser is None:
        return text_message(sampled, None if template is None else template)
    parsed = parser(sampled)
    expected = [(c["function"]["name"], loaded_arguments(c["function"]["arguments"]))
                for c in message.get("tool_calls", [])]
    if [(c.name, c.arguments) for c in parsed.calls] == expected and not parsed.errors:
        return assistant_message(sampled, parsed, first_index=index, style=style)
    if not strict or not sampled.split("</think>")[-1].strip():
        # the template's own parser is a guess; and a template that renders no text for a structured
        # call (it shows only content, as the tool demo's) teaches no format to check the run's parser on
        reasoning = sampled.split("</think>")[0] + "</think>" if "</think>" in sampled else ""
        return {**message, "content": reasoning} if expected else {**message, "content": sampled}
    raise TemplateError(
        f"the tool parser does not read back the call the chat template teaches: {sampled!r} parses "
        f"as {[(c.name, c.arguments) for c in parsed.calls]} (errors {parsed.errors}), expected {expected}; "
        f"set rollout.multi_turn.tool_parser to the template's format (tool_parser: auto picks it)")


def check_renders(tokenizer, *, tools, observation_role: str, kwargs) -> None:
    """The template shows the tools (when given) and renders ``observation_role`` messages."""
    user = [{"role": "user", "content": "What is 2 + 3?"}]
    if tools:
        prompt = render(tokenizer, user, tools=tools, add_generation_prompt=True, purpose="a prompt with tools",
                        template_kwargs=kwargs)
        hidden = [n for n in tool_names(tools) if n not in prompt]
        if hidden:
            raise TemplateError(
                f"the chat template of {template_name(tokenizer)!r} ignores tools=: the rendered prompt does not "
                f"mention tool(s) {hidden}, so the model would never see them; use a model whose template "
                "supports tools (Qwen2.5, Qwen3, Llama-3.1, Hermes ...) or set tokenizer.chat_template")
    from .turns import call_form  # below this module (it reads render from .rendering)

    if observation_role == "tool" and tools:
        name, cid = tool_names(tools)[0], call_id(id_style(tokenizer.chat_template), tool_names(tools)[0], 0)
        call = call_form(tokenizer, user, {"role": "assistant", "content": "", "tool_calls": [  # functionary-v3.2:
            {"id": cid, "type": "function", "function": {"name": name, "arguments": example_arguments(tools[0])}}]},
            tools=tools, template_kwargs=kwargs)  # OpenAI's string form
        turn = [call, tool_message(name, PROBE_MARKER, cid)]
    else:
        turn = [{"role": "assistant", "content": "Let me check."}, {"role": observation_role, "content": PROBE_MARKER}]
    text = render(tokenizer, user + turn, tools=tools, add_generation_prompt=True,
                  purpose=f"a {observation_role!r} message", template_kwargs=kwargs)
    if PROBE_MARKER not in text:
        raise TemplateError(
            f"the chat template of {template_name(tokenizer)!r} cannot render {observation_role} messages (their "
            f"content does not appear in the rendering), so the model would never see the observations; "
            f"use a template that renders role {observation_role!r}")
