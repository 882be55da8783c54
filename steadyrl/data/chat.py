"""Prompts as model input: chat templates, tokenisation and the prompt-length filter.

``render_prompt`` decides, per prompt, whether the tokenizer's chat template is applied:

=====================  ==========================  =================================
``chat_template``      string prompt               chat-format prompt (message list)
=====================  ==========================  =================================
``None`` (default)     used as is                  rendered with the template
``True``               wrapped as one user         rendered with the template
                       message and rendered
``False``              used as is                  DataError (only a template can
                                                   render messages)
=====================  ==========================  =================================

Rendering is ``apply_chat_template(messages, add_generation_prompt=True, tokenize=False)``; a
prompt that needs the template with a tokenizer that has none is a DataError, a template that
fails to render (it raised, or returned something other than text) a :class:`ChatTemplateError`,
which the trainer prefixes with the config key behind it (``data.chat_template`` /
``data.chat_template_kwargs``).

``encode_prompt`` tokenises the rendered text. A rendered chat template already holds its special
tokens (BOS and the like), so none are added; a plain string gets the tokenizer's usual ones
(``add_special_tokens=True``). The rollout engine must encode the same way for
``max_prompt_tokens`` to mean what it says, so it should call this function.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import ConfigError, DataError
from .loading import is_chat

__all__ = ["prompt_messages", "render_prompt", "encode_prompt", "prompt_lengths", "filter_by_length", "uses_chat_template",
           "ChatTemplateError"]


class ChatTemplateError(DataError):
    """The tokenizer's chat template failed to render a prompt."""


def _short(prompt) -> str:
    text = prompt if isinstance(prompt, str) else repr(prompt)
    return text if len(text) <= 60 else text[:57] + "..."


def uses_chat_template(tokenizer, prompt, chat_template: bool | None = None) -> bool:
    """Whether ``render_prompt`` applies the chat template to ``prompt`` (see the module table)."""
    if chat_template not in (None, True, False):
        raise ConfigError(f"chat_template={chat_template!r} must be true, false or null (automatic)")
    chat = is_chat(prompt)
    if chat_template is False:
        if chat:
            raise DataError(
                f"chat_template=False, but prompt {_short(prompt)!r} is a list of chat messages, which "
                "only a chat template can render; set chat_template to true or null, or use string prompts"
            )
        return False
    if not (chat or chat_template):
        return False
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        with_one = "set model.tokenizer to a tokenizer that has one (an instruct model's)"
        if chat:
            raise DataError(
                f"the prompt is a list of chat messages, but the tokenizer {name!r} has no chat template; "
                f"{with_one}, or give the prompts as plain strings (data.chat_template=false then uses "
                "them as they are)")
        raise DataError(
            f"data.chat_template=True, but the tokenizer {name!r} has no chat template; set "
            f"data.chat_template=false (or null) to use the prompts as they are, or {with_one}")
    return True


def prompt_messages(prompt) -> list[dict]:
    """A prompt as chat messages: a message list as it is, a string as one user message."""
    return prompt if is_chat(prompt) else [{"role": "user", "content": prompt}]


def render_prompt(tokenizer, prompt, *, chat_template: bool | None = None, tools: list[dict] | None = None,
                  template_kwargs: dict | None = None) -> str:
    """The prompt as the text the model sees (see the module docstring); ``tools`` (JSON schemas)
    go to the chat template's ``tools=``, ``template_kwargs`` are variables of the template."""
    if not uses_chat_template(tokenizer, prompt, chat_template):
        return prompt
    messages = prompt_messages(prompt)
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                             **({"tools": tools} if tools else {}), **(template_kwargs or {}))
    except Exception as err:  # noqa: BLE001 - a template may raise anything (jinja raise_exception, ...)
        raise ChatTemplateError(
            f"the tokenizer's chat template failed on prompt {_short(prompt)!r}: {type(err).__name__}: {err}"
        ) from None
    if not isinstance(text, str):
        raise ChatTemplateError(f"the tokenizer's chat template returned a {type(text).__name__}, expected text")
    return text


def encode_prompt(tokenizer, prompt, *, chat_template: bool | None = None) -> list[int]:
    """Token ids of the rendered prompt; special tokens added only to a prompt without a template."""
    templated = uses_chat_template(tokenizer, prompt, chat_template)
    text = render_prompt(tokenizer, prompt, chat_template=chat_template)
    return list(tokenizer(text, add_special_tokens=not templated)["input_ids"])


def prompt_lengths(tokenizer, prompts: Sequence, *, chat_template: bool | None = None) -> list[int]:
    """Token counts of ``encode_prompt`` for many prompts (tokenised in two batched calls)."""
    texts = [render_prompt(tokenizer, p, chat_template=chat_template) for p in prompts]
    templated = [uses_chat_template(tokenizer, p, chat_template) for p in prompts]
    lengths = [0] * len(texts)
    for flag in (True, False):
        idx = [i for i, t in enumerate(templated) if t is flag]
        if idx:
            ids = tokenizer([texts[i] for i in idx], add_special_tokens=not flag)["input_ids"]
            for i, row in zip(idx, ids):
                lengths[i] = len(row)
    return lengths


def filter_by_length(
    records: Sequence[dict], tokenizer, max_prompt_tokens: int, *, chat_template: bool | None = None
) -> tuple[list[dict], int]:
    """``(records whose encoded prompt has <= max_prompt_tokens tokens, number dropped)``.

    Records are kept in order and not copied. Dropping every record is a DataError that says how
    long the prompts are.
    """
    if isinstance(max_prompt_tokens, bool) or not isinstance(max_prompt_tokens, int) or max_prompt_tokens < 1:
        raise ConfigError(f"max_prompt_tokens={max_prompt_tokens!r} must be an integer >= 1")
    if not records:
        raise DataError("there are no prompt records to filter")
    lengths = prompt_lengths(tokenizer, [r["prompt"] for r in records], chat_template=chat_template)
    kept = [r for r, n in zip(records, lengths) if n <= max_prompt_tokens]
    if not kept:
        raise DataError(
            f"all {len(records)} prompts are longer than max_prompt_tokens={max_prompt_tokens} "
            f"(the shortest has {min(lengths)} tokens, the longest {max(lengths)}); raise max_prompt_tokens"
        )
    return kept, len(records) - len(kept)
