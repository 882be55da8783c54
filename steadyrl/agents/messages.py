"""The messages a tool-calling turn becomes, in the shape chat templates expect (OpenAI's).

A policy turn that calls tools is kept in the conversation as an assistant message with
``tool_calls`` (each with an ``id``, ``type: function`` and ``function: {name, arguments}``), and
each result as a ``tool`` message with the ``tool_call_id`` it answers. Mistral, Devstral and
Command-R templates raise without that shape; Kimi-K2 shows the id to the model (``## Return of
functions.add:0``). Only the text after the policy's end token is ever rendered into tokens, so
the shape changes what the template writes around the next messages, never the sampled tokens.

Call ids: the id the model wrote when its format has one (Mistral's ``[CALL_ID]``, Kimi-K2's
``functions.name:index``), else one in the format the template demands (:func:`call_id`).
"""

from __future__ import annotations

KIMI_STYLE = "functions.{name}:{index}"
"""Kimi-K2's call ids: the tool's name and the call's index in the conversation."""


def id_style(template: str | None) -> str:
    """``kimi`` when the template names calls ``functions.<name>:<index>``, else ``alnum9`` (nine
    letters and digits: what Mistral's templates require, and accepted by every other one)."""
    text = template or ""
    return "kimi" if "## Return of" in text or "<|tool_call_begin|>" in text else "alnum9"


def call_id(style: str, name: str, index: int) -> str:
    """The id of the ``index``-th call (from 0, over the whole episode) to tool ``name``."""
    if style == "kimi":
        return KIMI_STYLE.format(name=name, index=index)
    return f"call{index:05d}"[-9:]


def assistant_message(text: str, parsed, *, first_index: int, style: str) -> dict:
    """The assistant message of a turn whose text was ``text`` and whose parse is ``parsed``
    (a :class:`~steadyrl.agents.parsers.ParsedTurn`): plain ``content`` when it made no call; the
    answer as ``content`` and the reasoning as ``thinking`` in formats that separate them (Harmony)."""
    reasoning = getattr(parsed, "reasoning", None)
    message = {"role": "assistant", "content": text}
    if reasoning is not None:  # a format with a reasoning channel (Harmony): the template's "thinking"
        message = {"role": "assistant", "content": parsed.content, **({"thinking": reasoning} if reasoning else {})}
    if parsed is None or not parsed.calls:
        return message
    calls = [{"id": call.id or call_id(style, call.name, first_index + i), "type": "function",
              "function": {"name": call.name, "arguments": call.arguments}}
             for i, call in enumerate(parsed.calls)]
    return {**message, "content": parsed.content, "tool_calls": calls}


def text_message(text: str, template: str | None) -> dict:
    """The assistant message of a turn read as text (an environment's episode): its ``content``, or
    for a Harmony template (gpt-oss, which raises on channel tags in ``content``) the final channel
    as ``content`` and the analysis channel as ``thinking``, as the template expects them."""
    if "<|channel|>" in (template or "") and "<|channel|>" in text:
        from .parsers import TOOL_PARSERS

        parsed = TOOL_PARSERS["harmony"](text)
        return {"role": "assistant", "content": parsed.content, **({"thinking": parsed.reasoning}
                                                                   if parsed.reasoning else {})}
    return {"role": "assistant", "content": text}


def tool_message(name: str, content: str | list, call_id: str | None = None) -> dict:
    """A tool's result (``call_id``: the call it answers, when it answers one)."""
    message = {"role": "tool", "name": name, "content": content}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message


def renders_tool_calls(tokenizer, tools: list[dict] | None, template_kwargs: dict | None = None) -> bool:
    """Whether the chat template writes an assistant message's ``tool_calls`` at all. One that shows
    only ``content`` (a plain ChatML template, the tool demo's) keeps the model's call text there, so
    a turn with calls stays a plain ``content`` message: the structured shape would render without
    the call, and the conversation would no longer be what the policy sampled."""
    from .rendering import TemplateError, render

    name = (tools[0].get("function", tools[0]).get("name") if tools else None) or "steadyrl_probe_tool"
    call = {"id": call_id("alnum9", name, 0), "type": "function", "function": {"name": name, "arguments": {}}}
    asked = "steadyrl-renders-calls-probe"  # not "hi": a template's tool instructions hold it ("within")
    messages = [{"role": "user", "content": asked}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    try:
        text = render(tokenizer, messages, tools=tools, add_generation_prompt=False, template_kwargs=template_kwargs)
    except TemplateError:
        return True  # it raises on the shape: the probe reports that; keep the shape it asked for
    return name in text.split(asked, 1)[-1]
