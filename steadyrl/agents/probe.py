"""The start-up probe: play a scripted episode as the rollout would and compare it with the template.

The rollout keeps the policy's tokens as sampled and appends the template's rendering of what
follows each turn (:func:`steadyrl.agents.chat.observation_ids`). That is exact only when the
resulting sequence is what the template renders for the whole conversation. The probe checks it
directly, before training: it scripts three turns (two tool calls or two user-role observations,
then an answer), takes as each sampled turn what the model would write (the template's own
rendering of that assistant message, with its reasoning when the template is a thinking one and
its generation prompt leaves thinking on), builds the episode text exactly as the rollout does,
and compares it with ``apply_chat_template`` of the whole conversation. Any difference refuses the
run with what the template does (drops reasoning, re-renders tool results, closes turns with a
token that does not stop generation ...) and the setting that would handle it.

It also checks that the template shows the tools, renders the observation role, closes an
assistant turn with a token that stops generation, and (given a parser) that the parser reads
back the calls the template writes. These are the pieces of the probe of ``rollout.multi_turn.mode:
single``; :func:`steadyrl.agents.modes.check_template` runs it (beside the other modes' probes, so that
a refusal names the modes that work), which keeps this module below :mod:`.modes`.
"""

from __future__ import annotations

import re

from .messages import id_style
from .templating import (CONTEXT_CHARS, PROBE_MARKER, TemplateDriftError, TemplateError, check_renders,
                         find_closer, first_difference, is_harmony, kept_message, render, rendered_suffix,
                         role_closer, scripted_turns, template_name, thinks)
from .turns import call_form, shape_turn

MODES = ("single", "stepwise", "as_sampled")
"""``rollout.multi_turn.mode`` values besides ``auto`` (docs/agents.md, "Multi-turn modes")."""

MODE_WORDS = {
    "stepwise": "rollout.multi_turn.mode: stepwise (per-turn samples: each turn trained on the template's "
                "rendering of its history, as at inference)",
    "as_sampled": "rollout.multi_turn.mode: as_sampled (one sequence, as the policy saw it while sampling)",
}


def _with_reasoning(message: dict, i: int, harmony: bool = False, field: bool = False) -> dict:
    """The scripted turn with its reasoning: in the template's field (``field``: the template renders
    ``reasoning_content``; Harmony's ``thinking``), else as a ``<think>`` block the model writes."""
    if harmony:
        return {**message, "thinking": f"r{i}"}
    if field:
        return {**message, "reasoning_content": f"r{i}"}
    return {**message, "content": f"<think>\nr{i}\n</think>\n\n" + (message.get("content") or "")}


def reads_reasoning(tokenizer, history, tools, kwargs) -> bool:
    """Whether the template shows an assistant turn's ``reasoning_content`` after ``history``."""
    mark = f"{PROBE_MARKER}-reasoning"
    try:
        text = render(tokenizer, list(history) + [{"role": "assistant", "content": "a", "reasoning_content": mark}],
                      tools=tools, add_generation_prompt=False, template_kwargs=kwargs)
    except TemplateError:
        return False
    return mark in text


def sampled_turn(tokenizer, history, message, new, *, tools, end_texts, kwargs, think: bool, i: int = 0):
    """``(text, end)``: what the model writes for ``message`` after ``history``'s generation prompt
    (the template's rendering of it, up to the end-of-turn text; the next message's role token for a
    template that writes no closer), with its reasoning first when it thinks (``think``), whether or
    not the template shows it."""
    if think:
        message = _with_reasoning(message, i, is_harmony(tokenizer), reads_reasoning(tokenizer, history, tools, kwargs))
    head = render(tokenizer, history, tools=tools, add_generation_prompt=True, template_kwargs=kwargs)
    base = render(tokenizer, history + [message], tools=tools, add_generation_prompt=False, template_kwargs=kwargs)
    if not base.startswith(head):
        diff = first_difference(head, base)
        hidden = think and f"r{i}" not in base[len(head) - CONTEXT_CHARS:]
        in_prompt = diff >= len(render(tokenizer, history, tools=tools, add_generation_prompt=False,
                                       template_kwargs=kwargs))
        what = ("drops the reasoning the model writes (its <think> block or analysis channel: the turn renders "
                "without it)" if hidden else "starts an assistant turn in its generation prompt differently from "
                "how it renders the turn (an empty reasoning block it drops ...)" if in_prompt else
                "renders the conversation so far differently once an assistant turn follows it")
        raise TemplateDriftError(
            f"the chat template of {template_name(tokenizer)!r} {what}: at character {diff} the prompt the "
            f"model continues "
            f"holds {head[diff:diff + CONTEXT_CHARS]!r}, the conversation with the turn "
            f"{base[diff:diff + CONTEXT_CHARS]!r}")
    closer = find_closer(base, len(head), end_texts) or role_closer(tokenizer, history, message, new, tools, end_texts,
                                                                  kwargs)
    if closer is None:
        raise TemplateError(
            f"the chat template of {template_name(tokenizer)!r} does not close an assistant turn with any of "
            f"the tokens "
            f"that stop generation {end_texts} (a turn renders as {base[len(head):][-CONTEXT_CHARS:]!r}); add the "
            f"closing token's id to eos_token_id in the model's generation_config.json")
    stop, end = closer
    text = base[len(head): stop - len(end)]
    if think:  # a template that writes an empty block before the content (Kimi-K2-Thinking): the model writes one
        text = re.sub(r"^(\s*)<think>\s*</think>\s*(?=<think>)", r"\1", text)
    if think and f"r{i}" not in text:  # the template hides it, the model still writes it
        opened = head.rstrip().endswith("<think>")
        text = (f"<|channel|>analysis<|message|>r{i}<|end|><|start|>assistant" if is_harmony(tokenizer) else
                f"\nr{i}\n</think>\n\n" if opened else f"<think>\nr{i}\n</think>\n\n") + text
    return text, end


def play(tokenizer, *, tools, observation_role: str, end_texts: list[str], kwargs=None, parser=None,
         strict: bool = True):
    """The scripted episode: ``(episode text as the rollout builds it, the template's rendering of
    the whole conversation)``. Raises ``TemplateError`` where the rollout would."""
    history = [{"role": "user", "content": "What is 2 + 3 + 4?"}]
    head = render(tokenizer, history, tools=tools, add_generation_prompt=True, template_kwargs=kwargs)
    think = thinks(tokenizer, head[-CONTEXT_CHARS:])
    style = id_style(tokenizer.chat_template)
    text, calls = head, 0
    before_end = text
    for i, (message, new) in enumerate(scripted_turns(tokenizer, tools, observation_role, style)):
        message = call_form(tokenizer, history, message, tools=tools, template_kwargs=kwargs)
        sampled, end = sampled_turn(tokenizer, history, message, new, tools=tools, end_texts=end_texts, kwargs=kwargs,
                                    think=think, i=i)
        assistant = shape_turn(tokenizer, history, sampled, kept_message(
            message, sampled, parser if observation_role == "tool" and tools else None, style, calls, strict,
            tokenizer.chat_template), tools=tools, template_kwargs=kwargs, end=end)
        calls += len(message.get("tool_calls") or [])
        text, before_end = text + sampled + end, text + sampled
        if new:
            text += rendered_suffix(tokenizer, history, assistant, new, tools, end_texts,
                                    f"a {observation_role!r} message", kwargs, end)
        history = history + [assistant] + new
    whole = render(tokenizer, history, tools=tools, add_generation_prompt=False, template_kwargs=kwargs)
    if whole == before_end:  # a template with no closer (GLM): the last stop token is the model's alone
        whole += text[len(before_end):]
    return text, whole


def diagnose(text: str, whole: str) -> str:
    i = first_difference(text, whole)
    lo, hi = max(0, i - CONTEXT_CHARS), i + CONTEXT_CHARS
    seen, shown = text[lo:hi], whole[lo:hi]
    if "</think>" in seen and "</think>" not in shown or text.count("</think>") > whole.count("</think>"):
        what = "drops the reasoning (<think> blocks) of assistant turns the model wrote it in"
    else:
        what = "renders earlier turns differently once the conversation goes on"
    return (f"{what}: the episode's tokens would not be the template's rendering of the conversation; first "
            f"difference at character {i}: episode {seen!r}, template {shown!r}")


def _exact(tokenizer, *, tools, observation_role, end_texts, kwargs) -> str | None:
    """None when the scripted episode is the template's rendering, else what differs."""
    try:
        text, whole = play(tokenizer, tools=tools, observation_role=observation_role, end_texts=end_texts,
                           kwargs=kwargs)
    except TemplateDriftError as err:
        return str(err)
    return None if whole.startswith(text) else diagnose(text, whole)


def alternatives(tokenizer, *, tools, observation_role, end_texts, kwargs) -> list[str]:
    """The settings under which the scripted episode is exact (to name in a refusal)."""
    found = []
    if observation_role != "tool" and tools is None and _works(
            tokenizer, tools=None, observation_role="tool", end_texts=end_texts, kwargs=kwargs):
        found.append("observations with the 'tool' role (rollout.multi_turn.observation_role: tool)")
    if "enable_thinking" in (tokenizer.chat_template or ""):
        for value in (True, False):
            if (kwargs or {}).get("enable_thinking") is value:
                continue
            flipped = {**(kwargs or {}), "enable_thinking": value}
            if _works(tokenizer, tools=tools, observation_role=observation_role, end_texts=end_texts, kwargs=flipped):
                found.append(f"data.chat_template_kwargs.enable_thinking: {str(value).lower()}")
    return found


def _works(tokenizer, **kw) -> bool:
    try:
        check_renders(tokenizer, tools=kw["tools"], observation_role=kw["observation_role"], kwargs=kw["kwargs"])
        return _exact(tokenizer, **kw) is None
    except TemplateError:
        return False
