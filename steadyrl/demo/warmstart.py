"""A short supervised warm start, so that RL begins from a model that is sometimes right.

Teacher forcing on ``<bos> prompt answer <eos>``, cross-entropy on the answer and ``<eos>`` tokens
only (the prompt is labelled -100):

    loss = - sum_{t in answer} log p(x_t | x_<t) / N_answer_tokens

AdamW at a constant learning rate, batches drawn with replacement by a generator seeded with
``seed``, so the same arguments give the same weights. It is meant to stop early, at a model that
gets a fraction of the held-out answers right, and leave the rest for RL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

__all__ = ["IGNORE_INDEX", "SupervisedSettings", "encode_supervised", "warm_start", "train_supervised"]

IGNORE_INDEX = -100
"""Label of the tokens the supervised loss skips (prompt and padding)."""


def encode_supervised(tokenizer, records: list[dict[str, str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``(input_ids, attention_mask, labels)``, each ``[N, L]``, of ``prompt answer <eos>``.

    ``labels`` equal ``input_ids`` on the answer and ``<eos>``, and -100 elsewhere.
    """
    rows, label_rows = [], []
    for record in records:
        prompt = tokenizer(record["prompt"])["input_ids"]
        answer = tokenizer(record["answer"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        label_rows.append([IGNORE_INDEX] * len(prompt) + answer)
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, label_row) in enumerate(zip(rows, label_rows)):
        input_ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(row)] = torch.tensor(label_row)
        attention_mask[i, : len(row)] = 1
    return input_ids, attention_mask, labels


def _answer_loss(model, input_ids, attention_mask, labels) -> torch.Tensor:
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
    )


@dataclass(frozen=True)
class SupervisedSettings:
    """One supervised run's settings: ``steps`` AdamW steps at learning rate ``lr`` (and
    ``weight_decay``), ``batch_size`` rows a step drawn with replacement by a generator seeded with
    ``seed``."""

    steps: int
    lr: float
    batch_size: int
    seed: int
    weight_decay: float = 0.0

    def __post_init__(self):
        if self.steps < 0 or self.batch_size < 1 or not self.lr > 0:
            raise ValueError(f"need steps >= 0, batch_size >= 1, lr > 0; got {self.steps}, {self.batch_size}, "
                             f"{self.lr}")


def warm_start(
    model,
    tokenizer,
    records: list[dict[str, str]],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
    weight_decay: float = 0.0,
) -> dict:
    """Fine-tune ``model`` in place for ``steps`` AdamW steps; returns ``{"losses", "seconds", "steps"}``.

    ``losses`` holds the answer-token loss of every step (before its update). The model is left
    in eval mode.
    """
    if not records:
        raise ValueError("records must not be empty")
    settings = SupervisedSettings(steps, lr, batch_size, seed, weight_decay)
    start = time.perf_counter()
    info = train_supervised(model, *encode_supervised(tokenizer, records), settings)
    return {**info, "seconds": time.perf_counter() - start}


def train_supervised(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor,
                     settings: SupervisedSettings) -> dict:
    """:func:`warm_start` on already encoded, right-padded rows (labels -100 where not trained)."""
    if input_ids.shape[0] == 0:
        raise ValueError("there are no rows to train on")
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    model.train()
    losses = []
    for _ in range(settings.steps):
        idx = torch.randint(input_ids.shape[0], (settings.batch_size,), generator=generator)
        width = int(attention_mask[idx].sum(-1).max())
        loss = _answer_loss(model, input_ids[idx, :width], attention_mask[idx, :width], labels[idx, :width])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return {"losses": losses, "seconds": time.perf_counter() - start, "steps": settings.steps}
