"""A sampled turn as an OpenAI-compatible server holds it: the token-truth rule (docs/agents.md, "Token truth").

vLLM's reasoning parsers for the ``<think>`` families (DeepSeek-R1, Qwen3, QwQ, SmolLM3, GLM ...)
split the text the model wrote after its generation prompt at the first ``</think>``::

    body                      = text after the first "<think>" (all of text when it has none)
    reasoning_content, content = body.partition("</think>")     (nothing stripped)

so DeepSeek-R1's ``<think>\\nr\\n</think>\\n\\n8`` is held as ``reasoning_content = "\\nr\\n"``,
``content = "\\n\\n8"``. Its tool parsers then cut the calls off the content: ``content`` is the text
before the first call marker, unstripped (Hermes' ``model_output[:find("<tool_call>")]``), and a
turn that is nothing but calls in a format without a marker (pythonic, bare JSON) has no content.

**Whitespace the template writes is not content**: only what the model wrote (after the generation
prompt, before its end-of-turn token) is split; whatever the template writes around the fields
comes back from the template when the conversation is rendered again, never from the message.

:func:`server_message` applies the rule; step-wise contexts are renderings of the conversation held
this way, and the drift metric (:func:`steadyrl.rollout.stepwise.truth_drift`) compares the contexts
the engine was given with it. Everything here is ``str.find`` / ``str.partition``: linear in the
turn's length, whatever the model wrote.
"""

from __future__ import annotations

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

CALL_STARTS = ("<tool_call>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<|tool_calls_section_begin|>",
               "[TOOL_CALLS]", "<|START_ACTION|>", "<|python_tag|>", "<function=", "<tool_calls>", "<TOOLCALL>",
               "<|tool_call_start|>", "<|tool_call>", "<minimax:tool_call>", "<seed:tool_call>", "functools[",
               "<|function_call|>", "<|tool_call:begin|>", "<|tools_prefix|>", "<|tool_call|>")
"""Where a call block starts in the formats the tool parsers read (the first found cuts the content)."""


_SPLITS = ("reasoning_content", ".split('</think>')", '.split("</think>")', "'</think>' in", '"</think>" in')
"""What a template that expects a reasoning parser's split does: it reads the ``reasoning_content``
field, or cuts ``</think>`` out of the content (DeepSeek-R1, QwQ: vLLM's ``deepseek_r1`` parser)."""


def thinks_with_tags(template: str | None) -> bool:
    """A ``<think>`` family served with a reasoning parser: its template names ``</think>`` and reads
    the split (``_SPLITS``). One that only renders the content (SmolLM3, Granite-3.3: no reasoning
    parser in vLLM) keeps the model's ``<think>`` block in the content, as written."""
    text = template or ""
    return THINK_CLOSE in text and any(s in text for s in _SPLITS)


def reasoning_split(text: str) -> tuple[str | None, str]:
    """``(reasoning_content, content)`` as vLLM's ``<think>`` reasoning parsers return them (module
    docstring); ``(None, text)`` when the model closed no reasoning block."""
    body = text.partition(THINK_OPEN)[2] if THINK_OPEN in text.partition(THINK_CLOSE)[0] else text
    if THINK_CLOSE not in body:
        return None, text
    reasoning, _, content = body.partition(THINK_CLOSE)
    return reasoning, content


def call_content(content: str, starts: tuple[str, ...] = CALL_STARTS) -> str:
    """The content a tool parser returns beside the calls it read from ``content``: the text before
    the first call marker, unstripped (no marker: the turn is all calls, no content)."""
    found = [i for i in (content.find(s) for s in starts) if i >= 0]
    return content[:min(found)] if found else ""


def server_message(text: str, template: str | None, calls: list[dict] | None = None) -> dict:
    """The assistant message a server holds for the turn ``text`` the model wrote (before its end
    token): ``reasoning_content`` split off for a ``<think>`` family, ``content`` unstripped, and
    ``calls`` (the tool parser's, in OpenAI's shape) with the content before them."""
    reasoning, content = reasoning_split(text) if thinks_with_tags(template) else (None, text)
    message: dict = {"role": "assistant"}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["content"] = call_content(content)
        message["tool_calls"] = list(calls)
    else:
        message["content"] = content
    return message


def as_written(text: str, template: str | None, opened: bool, calls: list[dict] | None = None) -> dict | None:
    """The server's message for a turn of a ``<think>`` family whose reasoning the model closed
    (``opened``: its generation prompt opened the block, so the server's parser saw only what came
    after ``<think>``); None for a turn the rule says nothing about (no ``</think>``: another
    family's markers, which the template's own readings decide)."""
    if THINK_CLOSE not in (template or "") or THINK_CLOSE not in text:
        return None
    if not thinks_with_tags(template):  # no reasoning parser (SmolLM3): the content is the text as written
        return server_message(text, template, calls)
    prefix = THINK_OPEN if opened and THINK_OPEN not in text.partition(THINK_CLOSE)[0] else ""
    return server_message(prefix + text, template, calls)

