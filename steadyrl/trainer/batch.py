"""The tensors of one training step, laid out for forward passes over prompt + response.

``input_ids = [prompt | response]`` (``[B, P + R]``, prompt left-padded, response right-padded).
The logits at positions ``P - 1 ... P + R - 2`` predict the response tokens, so per-token tensors
(``[B, R]``) line up with ``response_ids``. Position ids count real tokens only, as
``generate`` does for left-padded prompts, so recomputed log-probs match the sampled ones.
In a multi-turn episode the response holds the observations too: ``response_mask`` covers them
(the model attends to them), ``policy_mask`` only the tokens the policy sampled.
A vision-language model's rows carry their image inputs (``image_inputs``, one entry per row, None
for a text row; :mod:`steadyrl.vlm_inputs`): every row selection takes them with the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

from ..rollout import Generation


SEQUENCE, RESPONSE, ROW, ITEMS = "sequence", "response", "row", "items"
"""How a :class:`TrainBatch` field is laid out: ``[B, P + R]`` over prompt and response, ``[B, R]``
per response token, ``[B]`` per row, or a list with one item per row. Every field declares one
(:func:`batch_field`); row selection, moving and trimming (:func:`~.packing.trim`) go over the
fields by their layout, so a new per-token field is narrowed with the others, never forgotten."""

LAYOUTS = (SEQUENCE, RESPONSE, ROW, ITEMS)


def batch_field(layout: str, *, optional: bool = True):
    """A :class:`TrainBatch` field of ``layout`` (None by default when ``optional``)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    meta = {"layout": layout}
    return field(default=None, metadata=meta) if optional else field(metadata=meta)


def layout_of(f) -> str:
    """The declared layout of a :class:`TrainBatch` field (a field without one is a bug, refused)."""
    layout = f.metadata.get("layout")
    if layout not in LAYOUTS:
        raise TypeError(f"TrainBatch field {f.name!r} declares no layout (batch_field(...) with one of {LAYOUTS})")
    return layout


@dataclass
class TrainBatch:
    input_ids: torch.Tensor = batch_field(SEQUENCE, optional=False)  # [B, P+R]
    attention_mask: torch.Tensor = batch_field(SEQUENCE, optional=False)  # [B, P+R]
    position_ids: torch.Tensor = batch_field(SEQUENCE, optional=False)  # [B, P+R]
    response_ids: torch.Tensor = batch_field(RESPONSE, optional=False)  # [B, R]
    response_mask: torch.Tensor = batch_field(RESPONSE, optional=False)  # [B, R] attended to: turns and observations
    policy_mask: torch.Tensor | None = batch_field(RESPONSE)  # [B, R] sampled by the policy (None = response_mask)
    loss_mask: torch.Tensor | None = batch_field(RESPONSE)  # [B, R]: policy_mask with excluded samples zeroed
    old_logprobs: torch.Tensor | None = batch_field(RESPONSE)
    ref_logprobs: torch.Tensor | None = batch_field(RESPONSE)
    teacher_logprobs: torch.Tensor | None = batch_field(RESPONSE)  # [B, R] on-policy distillation's teacher
    rollout_logprobs: torch.Tensor | None = batch_field(RESPONSE)
    values: torch.Tensor | None = batch_field(RESPONSE)
    advantages: torch.Tensor | None = batch_field(RESPONSE)
    returns: torch.Tensor | None = batch_field(RESPONSE)
    sample_weights: torch.Tensor | None = batch_field(ROW)  # [B]
    old_entropy: torch.Tensor | None = batch_field(RESPONSE)  # [B, R] the old pass's entropies (top_entropy_quantile)
    token_weights: torch.Tensor | None = batch_field(RESPONSE)  # [B, R] the entropy selection (1 / 0)
    selected: torch.Tensor | None = batch_field(RESPONSE)  # [B, R] bool: the covariance selection (kl_cov / clip_cov)
    image_inputs: list[dict | None] | None = batch_field(ITEMS)  # a VLM's image inputs per row (None: no images)

    def __post_init__(self) -> None:
        if self.policy_mask is None:  # a single turn: every response token is the policy's
            self.policy_mask = self.response_mask

    @property
    def prompt_len(self) -> int:
        return self.input_ids.shape[1] - self.response_ids.shape[1]

    @property
    def response_len(self) -> int:
        return self.response_ids.shape[1]

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: torch.Tensor | slice) -> "TrainBatch":
        """Rows ``index`` of every tensor (a micro- or mini-batch)."""
        return replace(self, **{f.name: _take(getattr(self, f.name), index) for f in fields(self)})

    def to(self, device: torch.device) -> "TrainBatch":
        return replace(self, **{f.name: _move(getattr(self, f.name), device) for f in fields(self)})


def _take(x, index):
    if isinstance(x, list):  # one item per row (image inputs): the same rows, in the same order
        if isinstance(index, slice):
            rows = range(len(x))[index]
        else:
            index = torch.as_tensor(index)
            rows = (index.nonzero().reshape(-1) if index.dtype == torch.bool else index.reshape(-1)).tolist()
        return [x[i] for i in rows]
    return None if x is None else x[index]


def _move(x, device):
    if isinstance(x, list):
        return [None if item is None else {k: v.to(device) for k, v in item.items()} for item in x]
    return None if x is None else x.to(device)


def batch_from_generation(gen: Generation) -> TrainBatch:
    input_ids = torch.cat([gen.prompt_ids, gen.response_ids], dim=1)
    attention_mask = torch.cat([gen.prompt_mask, gen.response_mask], dim=1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_ids=gen.response_ids,
        response_mask=gen.response_mask,
        policy_mask=gen.trained_mask,
        rollout_logprobs=gen.rollout_logprobs,
        image_inputs=gen.image_inputs,
    )


def micro_batches(n: int, size: int):
    """Slices of ``range(n)`` of at most ``size`` rows."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))
