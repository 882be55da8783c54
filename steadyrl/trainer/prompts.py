"""Prompts ready for generation, and the scorer that runs the reward functions on completions.

A :class:`PromptItem` is one dataset record after rendering (chat template when it applies) and
tokenizing once: ``text`` is what reward functions receive as the prompt, ``ids`` what the
engine generates from, ``columns`` the record's other columns (``answer`` and the rest), passed
to reward functions as keyword lists, ``messages`` the record's prompt when it was a list of chat
messages (what TRL-style reward functions receive instead of ``text``), and ``conversation`` the
prompt as the chat messages the template rendered (a multi-turn episode continues it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..data import render_prompt
from ..data.chat import prompt_messages
from ..errors import DataError, RewardCallError
from ..rewards import RewardScorer, RewardSpec, ScoreResult


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


def completion_token_ids(response_ids, response_mask) -> list[list[int]]:
    """Each row's valid response token ids (EOS included) as a list of ints: ``completion_ids``."""
    return [row[mask.bool()].tolist() for row, mask in zip(response_ids, response_mask)]


class Scorer:
    """Calls the reward functions on completions of :class:`PromptItem` s, keeping their worker
    processes for the whole run (:meth:`close` stops them). With ``allow_empty`` (an environment
    gives the rewards) there may be no reward function: every sample then scores 0, valid.

    The first batch it scores is also a check of how the functions are called: a function whose
    signature cannot take the call (every sample failed with a binding ``TypeError``) stops the
    run there with a :class:`~steadyrl.errors.RewardCallError` (exit status 2), instead of
    failing every sample of every step. With ``domain_key`` each reward scores only the rows of its
    domains (``RewardSpec.domains``)."""

    def __init__(self, specs: list[RewardSpec], *, allow_empty: bool = False, domain_key: str | None = None):
        if not specs and not allow_empty:
            raise DataError("no reward function configured (rewards: [])")
        self._scorer = RewardScorer(specs, domain_key=domain_key) if specs else None
        self.names = [s.name for s in specs]
        self._first = True

    def __call__(self, prompts: list[PromptItem], completions: list[str],
                 completion_ids: list[list[int]] | None = None, extra_columns: dict | None = None) -> ScoreResult:
        if self._scorer is None:
            n = len(completions)
            return ScoreResult(names=[], weights={}, raw={}, scores=torch.zeros(n, dtype=torch.float64),
                               valid=torch.ones(n, dtype=torch.bool), failures={})
        keys = sorted({k for p in prompts for k in p.columns})
        columns = {k: [p.columns.get(k) for p in prompts] for k in keys}
        columns.update(extra_columns or {})
        chat = [p.messages for p in prompts]
        result = self._scorer.score([p.text for p in prompts], completions, columns, completion_ids=completion_ids,
                                    chat_prompts=chat if any(m is not None for m in chat) else None)
        first, self._first = self._first, False
        if first and result.call_errors:
            name, text = next(iter(result.call_errors.items()))
            raise RewardCallError(
                f"rewards: {name!r} cannot be called as {text}; every sample of the first batch failed "
                f"with it (the columns passed: {keys}). Fix the function's signature or the data "
                "(docs/rewards.md, 'How a function is called')")
        return result

    def close(self) -> None:
        if self._scorer is not None:
            self._scorer.close()
