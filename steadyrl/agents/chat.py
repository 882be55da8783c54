"""Chat templates in a multi-turn rollout: the observation tokens after a sampled turn, and a probe.

Token in, token out: the policy's sampled tokens are kept as sampled, never decoded and
re-encoded. Only what comes *after* a turn (tool results, environment feedback, the next
generation prompt) is rendered by the chat template and tokenised. For a conversation
``history`` whose next assistant turn (a message: its text, or its parsed ``tool_calls``) was
sampled ending with the stop token ``end``::

    head = render(history, add_generation_prompt=True)       # what the turn was sampled after
    base = render(history + [assistant])                     # must start with head
    full = render(history + [assistant] + new_messages, add_generation_prompt=True)
    closer = the first stop text in base after head (a template with none, like GLM: the stop
             text full writes right after base, the next message's role token, which must be ``end``)
    observation = full[after closer]                         # full must start with base up to it

The part of ``base`` after its closer (Qwen's ``\\n``, Phi-3.5's trailing eos) is what the template
writes when nothing follows, so it is not compared. A template that re-renders the turn before
(``base`` does not start with ``head``: Hermes' tool results) or the sampled turn once messages
follow (Qwen3 drops ``<think>`` blocks before the last *user* message) raises
``TemplateDriftError``. ``check_template`` (:mod:`.probe`) plays a whole scripted episode once,
before training, and compares it with the template's rendering of the whole conversation, so a
run fails at start-up rather than at its first tool call.
"""

from __future__ import annotations

import re

from ..errors import ConfigError
from .messages import call_id, id_style, tool_message

__all__ = ["TemplateError", "TemplateDriftError", "render", "observation_ids", "observation_tail_ids",
           "observation_overhead", "check_observation_room", "check_template"]

CONTEXT_CHARS = 40
"""Characters shown on each side of the first difference in a drift error."""

PROBE_MARKER = "steadyrl-probe-7c1e"
"""A string no template writes by itself: the probes look for it in the rendering."""


HISTORY_CLOSERS = {"<|return|>": "<|end|>"}
"""Stop tokens a template writes differently once the turn is history (Harmony: a final answer ends
with ``<|return|>`` when sampled, ``<|end|>`` in the conversation): the observation of the as-sampled
and step-wise modes follows either."""


class TemplateError(ConfigError):
    """The tokenizer's chat template cannot do what a multi-turn rollout needs."""


class TemplateDriftError(TemplateError):
    """Adding a turn changes how the template renders the earlier ones (no prefix property)."""


def _name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__


def _require_template(tokenizer) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError(
            f"multi-turn rollouts need a chat template, and the tokenizer {_name(tokenizer)!r} has none; "
            "use an instruct model's tokenizer or set tokenizer.chat_template to a Jinja template")


def render(tokenizer, messages: list[dict], *, tools: list[dict] | None, add_generation_prompt: bool,
           purpose: str = "a conversation", template_kwargs: dict | None = None) -> str:
    """``apply_chat_template(tokenize=False)``; any failure is a ``TemplateError`` naming ``purpose``.
    ``template_kwargs`` go to the template as variables (``enable_thinking``, ``date_string`` ...)."""
    _require_template(tokenizer)
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False,
            **(template_kwargs or {}))
    except Exception as err:  # noqa: BLE001 - a template may raise anything (raise_exception, ...)
        raise TemplateError(f"the chat template of {_name(tokenizer)!r} failed to render {purpose}: "
                            f"{type(err).__name__}: {err}") from None
    if not isinstance(text, str):
        raise TemplateError(f"the chat template of {_name(tokenizer)!r} returned a {type(text).__name__} "
                            f"for {purpose}, expected text")
    return text


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _drift_error(tokenizer, base: str, full: str, what: str) -> TemplateDriftError:
    i = _first_difference(base, full)
    lo, hi = max(0, i - CONTEXT_CHARS), i + CONTEXT_CHARS
    dropped = (base.count("</think>") > full[:len(base)].count("</think>")
               or any(b.strip() and b not in full for b in re.findall(r"<think>(.*?)</think>", base, re.S)))
    return TemplateDriftError(
        f"the chat template of {_name(tokenizer)!r} renders the conversation differently once {what} is "
        f"added{' (it re-renders earlier assistant turns: it drops their <think> blocks)' if dropped else ''} "
        f"(it is not a prefix of the longer rendering), so the observation tokens cannot be appended "
        f"to the sampled ones; first difference at character {i}: before {base[lo:hi]!r}, "
        f"after {full[lo:hi]!r}")


def _closer(base: str, start: int, end_texts: list[str]) -> tuple[int, str] | None:
    """The first end-of-turn text in ``base`` at or after ``start``: (its end position, the text)."""
    found = [(base.find(t, start), t) for t in end_texts if t and base.find(t, start) != -1]
    if not found:
        return None
    pos, text = min(found, key=lambda x: (x[0], -len(x[1])))
    return pos + len(text), text


def _next_role_token(base: str, full: str, end_texts: list[str]) -> tuple[int, str] | None:
    """For templates that write no closer, the turn ends where the next message's role token starts
    (GLM's ``<|observation|>`` / ``<|user|>``, which stop its generation): ``full`` extends ``base`` with it."""
    if not full.startswith(base):
        return None
    found = [t for t in end_texts if t and full.startswith(t, len(base))]
    return (len(base) + len(max(found, key=len)), max(found, key=len)) if found else None


def _as_message(assistant) -> dict:
    return assistant if isinstance(assistant, dict) else {"role": "assistant", "content": assistant}


def _suffix(tokenizer, history, assistant, new_messages, tools, end_texts, what, kwargs, end=None) -> str:
    """The text after the sampled turn's end token in the template's rendering with ``new_messages``
    and a generation prompt (see the module docstring)."""
    turns = list(history) + [_as_message(assistant)]
    for attempt in range(2):  # a second try: a date header may change between the renders
        head = render(tokenizer, list(history), tools=tools, add_generation_prompt=True,
                      purpose="the conversation before the sampled turn", template_kwargs=kwargs)
        base = render(tokenizer, turns, tools=tools, add_generation_prompt=False,
                      purpose="the conversation up to the sampled turn", template_kwargs=kwargs)
        full = render(tokenizer, turns + list(new_messages), tools=tools, add_generation_prompt=True,
                      purpose=f"the conversation with {what}", template_kwargs=kwargs)
        if not base.startswith(head):
            if attempt:
                raise _drift_error(tokenizer, head, base, "the sampled turn")
            continue
        closer = _closer(base, len(head), end_texts) or _next_role_token(base, full, end_texts)
        if closer is None and not full.startswith(base) and attempt:
            raise _drift_error(tokenizer, base, full, what)
        if closer is None and not full.startswith(base):
            continue
        if closer is None:
            raise TemplateError(
                f"the chat template of {_name(tokenizer)!r} does not close an assistant turn with any of the "
                f"end-of-turn texts {end_texts} (the tokens that stop generation); rendered turn ends with "
                f"{base[-CONTEXT_CHARS:]!r}")
        stop, text = closer
        if end is not None and text != end and stop > len(base):  # the stop is the next message's role token
            raise TemplateError(
                f"the policy ended its turn with {end!r} where the chat template of {_name(tokenizer)!r} writes "
                f"{text!r}, the role of the next message: that message cannot follow the token the policy sampled")
        turn = base[:stop] if stop <= len(base) else base + text
        if full.startswith(turn):
            return full[stop:]
    raise _drift_error(tokenizer, turn, full, what)


def _describe(new_messages: list[dict]) -> str:
    roles = sorted({str(m.get("role")) for m in new_messages})
    return f"the next {'/'.join(roles) or 'generation prompt'} message(s)"


def observation_ids(tokenizer, history: list[dict], assistant, new_messages: list[dict], *,
                    tools: list[dict] | None, end_texts: list[str], template_kwargs: dict | None = None,
                    end: str | None = None) -> list[int]:
    """The token ids to append after a sampled turn so that the conversation goes on with
    ``new_messages`` and a fresh generation prompt (see the module docstring). ``assistant`` is the
    turn as a message (with ``tool_calls`` when it called tools) or its text; ``end`` the end-of-turn
    text the policy sampled (None: the first of ``end_texts`` the template writes)."""
    text = _suffix(tokenizer, history, assistant, new_messages, tools, end_texts, _describe(new_messages),
                   template_kwargs, end)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _tail(tokenizer, history, assistant, new_messages, tools, end_texts, kwargs, end) -> str:
    """The text after the sampled turn's end token in the template's rendering of the conversation
    with ``new_messages`` and a generation prompt, found in that rendering alone: the last end-of-turn
    text before the first new message's content (located with marker contents). Earlier turns may
    render differently from how they were sampled (a thinking template drops their reasoning): only
    what follows the turn is taken, so this is the observation of the as-sampled and step-wise modes."""
    turns = list(history) + [_as_message(assistant)] + list(new_messages)
    for attempt in range(2):  # a second try: a date header may change between the renders
        full = render(tokenizer, turns, tools=tools, add_generation_prompt=True,
                      purpose="the conversation with the observation", template_kwargs=kwargs)
        marked = render(tokenizer, turns[:len(turns) - len(new_messages)] + [
            {**m, "content": f"{PROBE_MARKER}-{i}"} for i, m in enumerate(new_messages)], tools=tools,
            add_generation_prompt=True, purpose="the conversation with the observation", template_kwargs=kwargs)
        at = marked.find(f"{PROBE_MARKER}-0")
        if at < 0:
            raise TemplateError(f"the chat template of {_name(tokenizer)!r} does not show the content of a "
                                f"{new_messages[0].get('role')!r} message after an assistant turn")
        if full[:at] != marked[:at]:
            if attempt:
                raise TemplateError(f"the chat template of {_name(tokenizer)!r} renders the conversation before an "
                                    f"observation differently depending on the observation's content")
            continue
        closers = list(end_texts) + [HISTORY_CLOSERS[t] for t in end_texts if t in HISTORY_CLOSERS]
        found = [(full.rfind(t, 0, at), t) for t in closers if t and full.rfind(t, 0, at) != -1]
        if not found:
            raise TemplateError(
                f"the chat template of {_name(tokenizer)!r} does not close an assistant turn with any of the "
                f"end-of-turn texts {end_texts} (the tokens that stop generation) before the next message")
        pos, text = max(found, key=lambda x: (x[0] + len(x[1]), len(x[1])))
        if end is not None and text not in (end, HISTORY_CLOSERS.get(end)):
            raise TemplateError(
                f"the policy ended its turn with {end!r} where the chat template of {_name(tokenizer)!r} writes "
                f"{text!r} before the next message: that message cannot follow the token the policy sampled")
        return full[pos + len(text):]
    raise AssertionError("unreachable")


def observation_tail_ids(tokenizer, history: list[dict], assistant, new_messages: list[dict], *,
                         tools: list[dict] | None, end_texts: list[str], template_kwargs: dict | None = None,
                         end: str | None = None) -> list[int]:
    """As :func:`observation_ids`, for templates that re-render earlier turns (``rollout.multi_turn_mode``
    ``as_sampled`` and ``stepwise``): the template's rendering of ``new_messages`` and the next
    generation prompt, right after the end token of the sampled turn, taken from the rendering of
    the whole conversation with them, whatever the template does to the turns before."""
    text = _tail(tokenizer, history, assistant, new_messages, tools, end_texts, template_kwargs, end)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def observation_overhead(tokenizer, *, tools: list[dict] | None, observation_role: str, end_texts: list[str],
                         template_kwargs: dict | None = None, mode: str = "single") -> int:
    """The tokens the template writes for one ``observation_role`` message with empty content after a
    turn (its header, its end, the next generation prompt; for ``tool`` messages, the most over the
    tools' names): what ``rollout.max_observation_tokens`` must exceed for any content to fit."""
    from .probe import _thinks, reads_reasoning

    history = [{"role": "user", "content": "What is 2 + 3?"}]
    head = render(tokenizer, history, tools=tools, add_generation_prompt=True, template_kwargs=template_kwargs)
    # a <think> turn only when the model thinks here (Laguna-XS's template names <think>, thinking off);
    # in the template's reasoning field where it reads one (Spark-X2.5 writes <think>r1</think>)
    thinks = _thinks(tokenizer, head[-CONTEXT_CHARS:]) and "<think>" in (tokenizer.chat_template or "")
    field = thinks and reads_reasoning(tokenizer, history, tools, template_kwargs)
    turn = "<think>\nr1\n</think>\n\na1" if thinks and not field else "a1"
    reasoning = {"reasoning_content": "r1"} if field else {}
    names = (_tool_names(tools) if tools and observation_role == "tool" else []) or [None]

    def one(name: str | None) -> int:
        message, assistant = {"role": observation_role, "content": ""}, {"role": "assistant", "content": turn,
                                                                          **reasoning}
        if name is not None:  # a result answers a call (Mistral's templates insist)
            cid = call_id(id_style(tokenizer.chat_template), name, 0)
            assistant = {"role": "assistant", "content": turn[:-len("a1")], **reasoning, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": {}}}]}
            message = tool_message(name, "", cid)
            from .turns import call_form  # the arguments in the form the template renders (functionary: a string)

            assistant = call_form(tokenizer, history, assistant, tools=tools, template_kwargs=template_kwargs)
        ids_of = observation_ids if mode == "single" else observation_tail_ids  # rollout.multi_turn_mode
        return len(ids_of(tokenizer, history, assistant, [message], tools=tools, end_texts=end_texts,
                          template_kwargs=template_kwargs))

    return max(one(name) for name in names)


def check_observation_room(tokenizer, limit: int, *, tools: list[dict] | None, observation_role: str,
                           end_texts: list[str], template_kwargs: dict | None = None, mode: str = "single") -> None:
    """``rollout.max_observation_tokens`` (``limit``) must leave room for content after the
    template's own tokens (:func:`observation_overhead`): an observation is shortened by its content
    only, never by cutting the template's tokens. Raises ``ConfigError``."""
    overhead = observation_overhead(tokenizer, tools=tools, observation_role=observation_role,
                                    end_texts=end_texts, template_kwargs=template_kwargs, mode=mode)
    if limit <= overhead:
        raise ConfigError(
            f"rollout.max_observation_tokens = {limit}: the chat template of {_name(tokenizer)!r} alone needs "
            f"{overhead} tokens to wrap one empty {observation_role!r} message and the next generation prompt, "
            f"so no content would fit; set it to at least {overhead + 1}")


def _tool_names(tools: list[dict]) -> list[str]:
    return [t.get("function", t).get("name", "") for t in tools]


def check_template(tokenizer, *, tools: list[dict] | None, observation_role: str, end_texts: list[str],
                   template_kwargs: dict | None = None, parser=None) -> None:
    """Probe, before training, that the chat template supports a multi-turn rollout exactly
    (:func:`steadyrl.agents.probe.check_template`). Raises ``TemplateError`` / ``TemplateDriftError``."""
    from .probe import check_template as probe

    probe(tokenizer, tools=tools, observation_role=observation_role, end_texts=end_texts,
          template_kwargs=template_kwargs, parser=parser)
