"""A sampled turn as the message the chat template expects: ``reasoning_content``, ``content``, ``tool_calls``.

An OpenAI-style server with a reasoning parser holds an assistant turn as ``reasoning_content``
(the thought), ``content`` (the answer, without the template's own markers) and ``tool_calls`` (ids,
arguments as a JSON string). A template writes those fields inside its own markers
(``<think>...</think>``, ``<|START_THINKING|>...``, ``<|START_RESPONSE|>...``, ``<|content|>``,
``>>>all\\n`` ...). Keeping the raw sampled text as ``content`` has the template wrap it a second
time (``<|START_RESPONSE|><|START_RESPONSE|>8``) and lose the reasoning where the template reads it
from ``reasoning_content``.

:func:`shape_turn` reads the markers off the template itself: it renders an assistant message whose
fields are marker strings after the conversation so far, and matches what the model wrote (the
generation prompt's own part of the turn, then the sampled text) against that shape. Each reading is
checked by rendering it: the first whose rendering holds the turn as written is kept (the rendering
reproduces the sampled tokens); when none does (a template that drops the reasoning of the turn
it renders), the reading a reasoning parser would give. Matching is ``str.find`` on fixed markers:
linear in the turn's length, whatever the model wrote.
"""

from __future__ import annotations

import json

from .server import CALL_STARTS, as_written
from .rendering import HISTORY_CLOSERS, TemplateError, render

__all__ = ["shape_turn", "turn_renders", "written_turn", "served", "call_form", "string_arguments"]

R_MARK, C_MARK = "steadyrl-reasoning-5f2a", "steadyrl-content-5f2a"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def string_arguments(message: dict) -> dict:
    """``message`` with its calls' ``arguments`` as JSON strings (OpenAI's form)."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    return {**message, "tool_calls": [{**c, "function": {**c["function"], "arguments": c["function"]["arguments"]
                                                         if isinstance(c["function"]["arguments"], str) else
                                                         json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
                                      for c in calls]}


def _render(tokenizer, messages, tools, kwargs, prompt=False) -> str | None:
    try:
        return render(tokenizer, messages, tools=tools, add_generation_prompt=prompt, template_kwargs=kwargs)
    except TemplateError:
        return None


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _shape(tokenizer, history, tools, kwargs, plain: str, fields: dict) -> str | None:
    """The template's rendering of an assistant turn with marker ``fields``, from its role header on."""
    base = _render(tokenizer, history + [{"role": "assistant", **fields}], tools, kwargs)
    if base is None or C_MARK not in base:
        return None
    return base[_turn_start(plain, base):]


def _turn_start(plain: str, base: str) -> int:
    """Where the turn starts in ``base``: after the conversation before it (``plain``), or for a
    template that writes its generation prompt whatever it is asked (Command-R7B) at the tag where
    the two part (not inside it)."""
    at = _common(plain, base)
    return at if at == len(plain) else max(base.rfind(">", 0, at), base.rfind("\n", 0, at)) + 1


def _tail_cut(written: str, post: str) -> int:
    """How much of the end of ``written`` is the start of ``post`` (the template's text after the content)."""
    for j in range(min(len(post), len(written)), 0, -1):
        if written.endswith(post[:j]):
            return j
    return 0


def _readings(head: str, sampled: str, reasoning_shape: str | None, content_shape: str | None) -> list[dict]:
    """``{reasoning_content?, content}`` readings of the turn ``sampled`` after the prompt ``head``."""
    out = []
    if reasoning_shape and R_MARK in reasoning_shape and reasoning_shape.find(R_MARK) < reasoning_shape.find(C_MARK):
        r, c = reasoning_shape.find(R_MARK), reasoning_shape.find(C_MARK)
        pre, mid, post = reasoning_shape[:r], reasoning_shape[r + len(R_MARK):c], reasoning_shape[c + len(C_MARK):]
        start = _match_pre(head, sampled, pre)
        at = sampled.find(mid, start) if start is not None and mid else -1
        if at >= 0:
            body = sampled[at + len(mid):]
            out.append({"reasoning_content": sampled[start:at],
                        "content": body[:len(body) - _tail_cut(body, post)]})
    if content_shape:
        c = content_shape.find(C_MARK)
        pre, post = content_shape[:c], content_shape[c + len(C_MARK):]
        start = _match_pre(head, sampled, pre)
        if start is not None:
            body = sampled[start:]
            out.append({"content": body[:len(body) - _tail_cut(body, post)]})
    return out


def _match_pre(head: str, sampled: str, pre: str) -> int | None:
    """Where the fields start in ``sampled`` when the template's text before them (``pre``) is the
    end of the prompt ``head`` (its generation prompt holds part of it, or all) then the start of
    ``sampled``; None when it is not."""
    for j in range(min(len(pre), len(head)), -1, -1):
        if head.endswith(pre[:j]) and sampled.startswith(pre[j:]):
            return len(pre) - j
    return None


def _answer(split: dict | None, head: str, content_shape: str | None) -> dict | None:
    """A reasoning parser's reading with its answer read as the template's content (Reka-Edge writes
    ``assistant: `` before it and ``\n\n`` after it: the answer without them)."""
    if not split or not content_shape:
        return split
    found = [r for r in _readings(head, split["content"], None, content_shape) if r.get("content")]
    return {**split, "content": found[0]["content"]} if found else split


def _think_split(text: str) -> dict | None:
    """A reasoning parser's reading of a ``<think>`` turn (the template does not show reasoning)."""
    end = text.find(THINK_CLOSE)
    if end < 0:
        return None
    start = text.find(THINK_OPEN, 0, end)
    thought = text[start + len(THINK_OPEN) if start >= 0 else 0:end]
    return {"reasoning_content": thought.strip("\n"), "content": text[end + len(THINK_CLOSE):].lstrip("\n")}


def _call_reasoning(tokenizer, history, tools, kwargs, plain: str, head: str, sampled: str, message: dict,
                    most: int = 64) -> list[dict]:
    """A reading of a call turn's reasoning in a template that writes it before the calls from
    ``reasoning_content`` (Cohere2's ``<|START_THINKING|>r<|END_THINKING|><|START_ACTION|>``): the
    text between the template's text before the field and the longest start (at most ``most``
    characters) of its text after it that the turn holds."""
    shape = _render(tokenizer, history + [{"role": "assistant", "content": "", "reasoning_content": R_MARK,
                                           "tool_calls": message["tool_calls"]}], tools, kwargs)
    if shape is None or R_MARK not in shape:
        return []
    turn = shape[_turn_start(plain, shape):]
    r = turn.find(R_MARK)
    start = _match_pre(head, sampled, turn[:r])
    after = turn[r + len(R_MARK):r + len(R_MARK) + most]
    if start is None or not after:
        return []
    k = next((k for k in range(len(after), 0, -1) if sampled.find(after[:k], start) >= 0), 0)
    at = sampled.find(after[:k], start) if k else -1
    thought = sampled[start:at] if at > start else ""
    return [{"reasoning_content": thought}] if thought and not any(c in thought for c in CALL_STARTS) else []


def _with_calls(reading: dict, message: dict, sampled: str) -> list[dict]:
    """A reading of the text around a turn's calls, with the parser's calls (content: what the parser
    left outside the calls, less the reasoning; or nothing)."""
    calls = message.get("tool_calls")
    if not calls:
        return [{"role": "assistant", **reading}]
    content = str(message.get("content") or "")
    thought = reading.get("reasoning_content")
    if thought and thought in content:
        content = content.split(thought, 1)[1]
        for marker in (THINK_CLOSE,):
            content = content.split(marker, 1)[-1] if marker in content else content
        content = content.strip()
    out = [{"role": "assistant", **reading, "content": content, "tool_calls": calls}]
    if content:
        out.append({"role": "assistant", **reading, "content": "", "tool_calls": calls})
    return out


def _renders_as_written(base: str | None, head: str, plain: str, sampled: str, end: str | None) -> bool:
    """Whether ``base`` (the conversation with the kept turn) holds the turn as the model wrote it:
    the prompt then the sampled text (or, where the template renders the turns before differently
    once a turn follows, the turn from its role header on), followed by the end-of-turn text the
    model sampled (``end``; None: not checked) or by nothing (a template that writes no closer)."""
    if base is None:
        return False
    at = _common(plain, head)
    written = head[at:] + sampled
    if not base.startswith(head + sampled):
        at = base.find(written, min(len(plain), _turn_start(plain, base)))
        if at < 0:
            return False
    rest = base[at + len(written):]
    return end is None or not rest or rest.startswith(end) or rest.startswith(HISTORY_CLOSERS.get(end, end))


def turn_renders(tokenizer, history: list[dict], sampled: str, kept: dict, *, tools: list[dict] | None,
                 template_kwargs: dict | None = None, end: str | None = None) -> bool:
    """Whether the template renders ``kept`` after ``history`` as the model wrote the turn, or drops
    only its reasoning (the answer after ``</think>`` is there): the conversation holds the turn the
    model sampled, as the template shows it."""
    head = _render(tokenizer, history, tools, template_kwargs, prompt=True)
    plain = _render(tokenizer, history, tools, template_kwargs)
    base = _render(tokenizer, history + [kept], tools, template_kwargs)
    if head is None or plain is None or base is None:
        return True  # nothing to compare with: the rollout reports the template's failure itself
    if _renders_as_written(base, head, plain, sampled, end):
        return True
    at = _common(plain, head)
    written, start = head[at:] + sampled, _turn_start(plain, base)
    answer = written.rsplit(THINK_CLOSE, 1)[1].lstrip("\n") if THINK_CLOSE in written else None
    for shown, before in ((sampled, head[at:]), (answer, None)):
        if shown is None or not shown:
            continue
        pos = base.find(shown, start)
        rest = base[pos + len(shown):] if pos >= 0 else ""
        # what the template writes before it must be (part of) what the model saw before it: a template
        # that drops an empty reasoning block of its generation prompt, or the turn's reasoning
        allowed = before if before is not None else _bare(written[:len(written) - len(shown)], written)
        if pos >= 0 and allowed.startswith(base[start:pos] if before is not None else _bare(base[start:pos], written)) and (
                end is None or not rest or rest.startswith(end) or rest.startswith(HISTORY_CLOSERS.get(end, end))):
            return True
    return False


def _bare(text: str, written: str) -> str:
    """``text`` without whitespace and without the reasoning of the turn ``written`` (a template that
    drops the reasoning may keep its block empty: ``<think></think>``)."""
    split = _think_split(written)
    thought = split["reasoning_content"] if split else ""
    return "".join((text.replace(thought, "") if thought else text).split())


def shape_turn(tokenizer, history: list[dict], sampled: str, message: dict, *, tools: list[dict] | None,
               template_kwargs: dict | None = None, end: str | None = None) -> dict:
    """The message to keep for a turn whose text (before its end token) was ``sampled``, given
    ``message`` (the parser's reading: ``content``, ``tool_calls``; or the text as ``content``)
    (module docstring); ``end``: the end-of-turn text the model sampled. A message in a template's own
    reasoning field (Harmony's ``thinking``) is kept as it is."""
    if "thinking" in message or not getattr(tokenizer, "chat_template", None):
        return message
    kwargs = template_kwargs
    head = _render(tokenizer, history, tools, kwargs, prompt=True)
    plain = _render(tokenizer, history, tools, kwargs)
    if head is None or plain is None:
        return message
    written = written_turn(tokenizer, history, sampled, message.get("tool_calls"), tools=tools, template_kwargs=kwargs)
    if written is not None:  # a <think> family: the turn as a server's reasoning and tool parsers hold it
        return written
    reasoning_shape = _shape(tokenizer, history, tools, kwargs, plain,
                             {"content": C_MARK, "reasoning_content": R_MARK})
    content_shape = _shape(tokenizer, history, tools, kwargs, plain, {"content": C_MARK})
    readings = _readings(head, sampled, reasoning_shape, content_shape)
    if message.get("tool_calls"):
        split = _think_split(sampled)
        readings = [r for r in readings if "reasoning_content" in r] + _call_reasoning(
            tokenizer, history, tools, kwargs, plain, head, sampled, message) + (
            [{"reasoning_content": split["reasoning_content"]}] if split else [{}])
        candidates = [m for r in readings for m in _with_calls(r, message, sampled)]
        candidates = [string_arguments(m) for m in candidates] + candidates
    else:
        split = _answer(_think_split(sampled), head, content_shape)
        if split:  # a reasoning parser splits a <think> block off, whatever the template would make of it
            readings = [r for r in readings if "reasoning_content" in r]
        candidates = [{"role": "assistant", **r} for r in readings] + ([{"role": "assistant", **split}] if split
                                                                        else [message])
    for candidate in candidates:
        if _renders_as_written(_render(tokenizer, history + [candidate], tools, kwargs), head, plain, sampled, end):
            return candidate
    # no reading renders as written (the template drops the turn's reasoning): a reasoning parser's
    split = _answer(_think_split(sampled if "<think>" in sampled or not head.rstrip().endswith("<think>") else
                                 "<think>" + sampled), head, content_shape)
    if split is None:
        return message
    if message.get("tool_calls"):
        return _with_calls({"reasoning_content": split["reasoning_content"]}, message, sampled)[0]
    return {"role": "assistant", **split}


def _ws_end(text: str) -> str:
    return text[len(text.rstrip()):]


def _ws_start(text: str) -> str:
    return text[:len(text) - len(text.lstrip())]


def _layout(tokenizer, history, tools, kwargs, plain: str, calls) -> tuple[str, str, str, str]:
    """The whitespace the template itself writes inside its reasoning block (after its opener,
    before its closer) and around the answer (after its own ``</think>``, after the answer before its
    end or calls), read off a turn of marker fields; none where it shows no reasoning."""
    extra = {"tool_calls": calls} if calls else {}
    for fields in ({"content": C_MARK, "reasoning_content": R_MARK, **extra},
                   {"content": THINK_OPEN + R_MARK + THINK_CLOSE + C_MARK, **extra}):
        shape = _render(tokenizer, history + [{"role": "assistant", **fields}], tools, kwargs)
        if shape is None or C_MARK not in shape:
            continue
        turn = shape[_turn_start(plain, shape):]
        r, c = turn.find(R_MARK), turn.find(C_MARK)
        if not 0 <= r < c:
            return "", "", "", _ws_start(turn[c + len(C_MARK):])
        between = turn[r + len(R_MARK):c]
        return _ws_end(turn[:r]), _ws_start(between), _ws_end(between), _ws_start(turn[c + len(C_MARK):])
    return "", "", "", ""


def _cut(text: str, lead: str, trail: str) -> str:
    """``text`` less ``lead`` at its start and ``trail`` at its end, where it has them."""
    text = text[len(lead):] if lead and text.startswith(lead) else text
    return text[:len(text) - len(trail)] if trail and text.endswith(trail) else text


def written_turn(tokenizer, history: list[dict], sampled: str, calls: list[dict] | None, *,
                 tools: list[dict] | None, template_kwargs: dict | None = None) -> dict | None:
    """The message a server holds for the turn ``sampled`` of a ``<think>`` family (its generation
    prompt may have opened the block): :func:`steadyrl.agents.server.as_written`, less the
    whitespace the template writes inside its reasoning block and around the answer itself (it
    writes it again on every render: whitespace the template writes is not content); None where
    the rule is silent (no ``</think>``)."""
    head = _render(tokenizer, history, tools, template_kwargs, prompt=True)
    plain = _render(tokenizer, history, tools, template_kwargs)
    if head is None or plain is None:
        return None
    message = as_written(sampled, tokenizer.chat_template, head.rstrip().endswith(THINK_OPEN), calls)
    if message is None or "reasoning_content" not in message:
        return message
    r_lead, r_trail, lead, trail = _layout(tokenizer, history, tools, template_kwargs, plain, calls)
    return {**message, "reasoning_content": _cut(message["reasoning_content"], r_lead, r_trail),
            "content": _cut(message["content"], lead, trail)}


def served(tokenizer, history: list[dict], sampled: str, kept: dict, tools, template_kwargs=None) -> bool:
    """Whether ``kept`` is the server's message for the turn (a ``<think>`` family's split): the
    conversation holds what inference holds, whatever the template makes of it."""
    shaped = written_turn(tokenizer, history, sampled, kept.get("tool_calls"), tools=tools,
                          template_kwargs=template_kwargs)
    return shaped is not None and all(shaped.get(k) == kept.get(k) for k in ("reasoning_content", "content"))


def call_form(tokenizer, history: list[dict], message: dict, *, tools: list[dict] | None,
              template_kwargs: dict | None = None) -> dict:
    """``message`` (with ``tool_calls``) with its arguments in the form the template renders as the
    call's JSON: OpenAI's string form, unless the template shows the string other than as the JSON
    (escaped by ``tojson``, or not at all: a format that walks the arguments' keys), then the object."""
    as_string = string_arguments(message)
    if as_string is message or not message.get("tool_calls"):
        return message
    text, plain = _render(tokenizer, history + [as_string], tools, template_kwargs), _render(
        tokenizer, history, tools, template_kwargs)
    if text is None or plain is None:
        return message
    turn = text[_turn_start(plain, text):]  # the turn alone: an earlier call may show the same arguments
    # a template that writes its own braces around the arguments (gemma-4's call:add{a:1}) walks a mapping
    shown = all(c["function"]["arguments"] in turn and "{" + c["function"]["arguments"] + "}" not in turn
                for c in as_string["tool_calls"])
    return as_string if shown or text == _render(tokenizer, history + [message], tools, template_kwargs) else message
