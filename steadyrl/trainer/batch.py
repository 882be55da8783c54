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

from dataclasses import dataclass, fields, replace

import torch

from ..rollout import Generation


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, P+R]
    attention_mask: torch.Tensor  # [B, P+R]
    position_ids: torch.Tensor  # [B, P+R]
    response_ids: torch.Tensor  # [B, R]
    response_mask: torch.Tensor  # [B, R] attended to: turns and observations
    policy_mask: torch.Tensor | None = None  # [B, R] sampled by the policy (None = response_mask)
    loss_mask: torch.Tensor | None = None  # [B, R]: policy_mask with excluded samples zeroed
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None  # [B, R] on-policy distillation's teacher (teacher.*)
    rollout_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    sample_weights: torch.Tensor | None = None  # [B]
    old_entropy: torch.Tensor | None = None  # [B, R] the old pass's entropies (top_entropy_quantile)
    token_weights: torch.Tensor | None = None  # [B, R] the entropy selection of the mini-batch (1 / 0)
    selected: torch.Tensor | None = None  # [B, R] bool: the covariance selection (kl_cov / clip_cov)
    image_inputs: list[dict | None] | None = None  # a VLM's image inputs per row (None: no row has images)

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
