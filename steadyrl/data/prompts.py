"""Prompts ready for generation.

A :class:`PromptItem` is one dataset record after rendering (chat template when it applies) and
tokenizing once: ``text`` is what reward functions receive as the prompt, ``ids`` what the
engine generates from, ``columns`` the record's other columns (``answer`` and the rest), passed
to reward functions as keyword lists, ``messages`` the record's prompt when it was a list of chat
messages (what TRL-style reward functions receive instead of ``text``), and ``conversation`` the
prompt as the chat messages the template rendered (a multi-turn episode continues it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import DataError
from .chat import prompt_messages, render_prompt


@dataclass(frozen=True)
class PromptItem:
    text: str
    ids: list[int]
    columns: dict = field(default_factory=dict)
    messages: list | None = None  # the record's prompt, when it is a list of chat messages
    conversation: list | None = None  # the chat messages the template rendered (multi-turn history)


def prepare_prompts(records: list[dict], tokenizer, *, max_prompt_tokens: int,
                    chat_template: bool | None, source: str,
                    tools: list[dict] | None = None,
                    template_kwargs: dict | None = None) -> tuple[list[PromptItem], int]:
    """Render and tokenize ``records``; drop those over ``max_prompt_tokens``.

    Returns ``(items, dropped)``. All prompts over the limit is a :class:`DataError`.
    """
    items, lengths = [], []
    for record in records:
        prompt = record["prompt"]
        text = render_prompt(tokenizer, prompt, chat_template=chat_template, tools=tools,
                             template_kwargs=template_kwargs)
        templated = isinstance(prompt, list) or chat_template is True
        # verbose=False: the tokenizer's "longer than the model's maximum" warning is ours to say
        ids = tokenizer(text, add_special_tokens=not templated, verbose=False)["input_ids"]
        lengths.append(len(ids))
        if len(ids) <= max_prompt_tokens:
            columns = {k: v for k, v in record.items() if k != "prompt"}
            items.append(PromptItem(text=text, ids=list(ids), columns=columns,
                                    messages=prompt if isinstance(prompt, list) else None,
                                    conversation=prompt_messages(prompt) if templated else None))
    if records and not items:
        raise DataError(
            f"all {len(records)} prompts of {source} are longer than data.max_prompt_tokens = "
            f"{max_prompt_tokens} tokens (the shortest has {min(lengths)}, the longest {max(lengths)}); "
            "raise the limit"
        )
    return items, len(records) - len(items)
