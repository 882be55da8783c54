"""Prompts ready for generation, and the scorer that runs the reward functions on completions.

A :class:`PromptItem` is one dataset record after rendering (chat template when it applies) and
tokenizing once: ``text`` is what reward functions receive as the prompt, ``ids`` what the
engine generates from, ``columns`` the record's other columns (``answer`` and the rest), passed
to reward functions as keyword lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..data import render_prompt
from ..errors import DataError
from ..rewards import RewardScorer, RewardSpec, ScoreResult


@dataclass(frozen=True)
class PromptItem:
    text: str
    ids: list[int]
    columns: dict = field(default_factory=dict)


def prepare_prompts(records: list[dict], tokenizer, *, max_prompt_tokens: int,
                    chat_template: bool | None, source: str) -> tuple[list[PromptItem], int]:
    """Render and tokenize ``records``; drop those over ``max_prompt_tokens``.

    Returns ``(items, dropped)``. All prompts over the limit is a :class:`DataError`.
    """
    items, lengths = [], []
    for record in records:
        prompt = record["prompt"]
        text = render_prompt(tokenizer, prompt, chat_template=chat_template)
        templated = isinstance(prompt, list) or chat_template is True
        # verbose=False: the tokenizer's "longer than the model's maximum" warning is ours to say
        ids = tokenizer(text, add_special_tokens=not templated, verbose=False)["input_ids"]
        lengths.append(len(ids))
        if len(ids) <= max_prompt_tokens:
            columns = {k: v for k, v in record.items() if k != "prompt"}
            items.append(PromptItem(text=text, ids=list(ids), columns=columns))
    if records and not items:
        raise DataError(
            f"all {len(records)} prompts of {source} are longer than data.max_prompt_tokens = "
            f"{max_prompt_tokens} tokens (the shortest has {min(lengths)}, the longest {max(lengths)}); "
            "raise the limit"
        )
    return items, len(records) - len(items)


class Scorer:
    """Calls the reward functions on completions of :class:`PromptItem` s, keeping their worker
    processes for the whole run (:meth:`close` stops them)."""

    def __init__(self, specs: list[RewardSpec]):
        if not specs:
            raise DataError("no reward function configured (rewards: [])")
        self._scorer = RewardScorer(specs)
        self.names = [s.name for s in specs]

    def __call__(self, prompts: list[PromptItem], completions: list[str]) -> ScoreResult:
        keys = sorted({k for p in prompts for k in p.columns})
        columns = {k: [p.columns.get(k) for p in prompts] for k in keys}
        return self._scorer.score([p.text for p in prompts], completions, columns)

    def close(self) -> None:
        self._scorer.close()
