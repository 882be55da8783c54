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

from ..errors import ConfigError
from .messages import call_id, id_style, tool_message
from .templating import (  # noqa: F401 - the errors, render and the constants are read from here too
    CONTEXT_CHARS, HISTORY_CLOSERS, PROBE_MARKER, REASONING_OPENERS, TemplateDriftError, TemplateError, render, rendered_suffix,
    rendered_tail, template_name, thinks, tool_names)

__all__ = ["TemplateError", "TemplateDriftError", "render", "observation_ids", "observation_tail_ids",
           "observation_overhead", "check_observation_room", "check_template"]


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
    text = rendered_suffix(tokenizer, history, assistant, new_messages, tools, end_texts, _describe(new_messages),
                   template_kwargs, end)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def observation_tail_ids(tokenizer, history: list[dict], assistant, new_messages: list[dict], *,
                         tools: list[dict] | None, end_texts: list[str], template_kwargs: dict | None = None,
                         end: str | None = None) -> list[int]:
    """As :func:`observation_ids`, for templates that re-render earlier turns (``rollout.multi_turn.mode``
    ``as_sampled`` and ``stepwise``): the template's rendering of ``new_messages`` and the next
    generation prompt, right after the end token of the sampled turn, taken from the rendering of
    the whole conversation with them, whatever the template does to the turns before."""
    text = rendered_tail(tokenizer, history, assistant, new_messages, tools, end_texts, template_kwargs, end)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def observation_overhead(tokenizer, *, tools: list[dict] | None, observation_role: str, end_texts: list[str],
                         template_kwargs: dict | None = None, mode: str = "single") -> int:
    """The tokens the template writes for one ``observation_role`` message with empty content after a
    turn (its header, its end, the next generation prompt; for ``tool`` messages, the most over the
    tools' names): what ``rollout.multi_turn.max_observation_tokens`` must exceed for any content to fit."""
    from .probe import reads_reasoning

    history = [{"role": "user", "content": "What is 2 + 3?"}]
    head = render(tokenizer, history, tools=tools, add_generation_prompt=True, template_kwargs=template_kwargs)
    # a <think> turn only when the model thinks here (Laguna-XS's template names <think>, thinking off);
    # in the template's reasoning field where it reads one (Spark-X2.5 writes <think>r1</think>)
    thinking = thinks(tokenizer, head[-CONTEXT_CHARS:]) and ("<think>" in (tokenizer.chat_template or "")
                                                             or head.rstrip().endswith(REASONING_OPENERS))
    field = thinking and reads_reasoning(tokenizer, history, tools, template_kwargs)
    turn = "<think>\nr1\n</think>\n\na1" if thinking and not field else "a1"
    reasoning = {"reasoning_content": "r1"} if field else {}
    names = (tool_names(tools) if tools and observation_role == "tool" else []) or [None]

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
        ids_of = observation_ids if mode == "single" else observation_tail_ids  # rollout.multi_turn.mode
        return len(ids_of(tokenizer, history, assistant, [message], tools=tools, end_texts=end_texts,
                          template_kwargs=template_kwargs))

    return max(one(name) for name in names)


def check_observation_room(tokenizer, limit: int, *, tools: list[dict] | None, observation_role: str,
                           end_texts: list[str], template_kwargs: dict | None = None, mode: str = "single") -> None:
    """``rollout.multi_turn.max_observation_tokens`` (``limit``) must leave room for content after the
    template's own tokens (:func:`observation_overhead`): an observation is shortened by its content
    only, never by cutting the template's tokens. Raises ``ConfigError``."""
    overhead = observation_overhead(tokenizer, tools=tools, observation_role=observation_role,
                                    end_texts=end_texts, template_kwargs=template_kwargs, mode=mode)
    if limit <= overhead:
        raise ConfigError(
            f"rollout.multi_turn.max_observation_tokens = {limit}: the chat template of "
            f"{template_name(tokenizer)!r} alone needs "
            f"{overhead} tokens to wrap one empty {observation_role!r} message and the next generation prompt, "
            f"so no content would fit; set it to at least {overhead + 1}")


def check_template(tokenizer, *, tools: list[dict] | None, observation_role: str, end_texts: list[str],
                   template_kwargs: dict | None = None, parser=None) -> None:
    """Probe, before training, that the chat template supports a multi-turn rollout exactly
    (:func:`steadyrl.agents.modes.check_template`). Raises ``TemplateError`` / ``TemplateDriftError``."""
    from .modes import check_template as probe

    probe(tokenizer, tools=tools, observation_role=observation_role, end_texts=end_texts,
          template_kwargs=template_kwargs, parser=parser)
