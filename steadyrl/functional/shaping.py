"""Reward shaping before the advantage: DAPO's overlong punishment and GDPO's per-reward normalisation.

* **Soft overlong punishment** (DAPO, Yu et al., arXiv 2503.14476, eq. 13). With the length limit
  ``L_max`` and a buffer of ``L_buf`` tokens before it::

      R_len(L) = 0                                  if L <= L_max - L_buf
               = -factor * (L - (L_max - L_buf)) / L_buf   if L_max - L_buf < L <= L_max
               = -factor                            if L > L_max

  added to the task reward, so a response that runs into the limit is told so smoothly rather than
  dropped (``mask_truncated``) or scored like any failure.

* **Group reward-decoupled normalisation** (GDPO, Liu et al., arXiv 2601.05242; TRL's
  ``multi_objective_aggregation="normalize_then_sum"``). With reward components ``r_k`` and weights
  ``w_k``, each component is normalised within its group before the weighted sum, then the sum over
  the batch::

      A_k = (r_k - mean_g r_k) / (std_g r_k + eps)       A = sum_k w_k A_k
      A_hat = (A - mean_batch A) / (std_batch A + eps)

  so a component on a large scale, or one that varies in every group, cannot drown the others (GRPO
  on the summed reward collapses distinct reward combinations onto the same advantage).

Pure functions of tensors, float64 for float64 input and float32 otherwise; a group of one, equal
rewards or a component missing for some samples give 0 for those samples, never NaN.
"""

from __future__ import annotations

import torch

from .constants import NORM_EPS, OVERLONG_PENALTY_FACTOR
from .rewards import group_mean_std
from .stats import acc_dtype, masked_mean, masked_var

__all__ = ["overlong_penalty", "normalize_then_sum"]


def overlong_penalty(lengths: torch.Tensor, max_length: int | torch.Tensor, buffer: int,
                     factor: float = OVERLONG_PENALTY_FACTOR) -> torch.Tensor:
    """DAPO's soft overlong punishment ``[B]`` (module docstring): 0 up to ``max_length - buffer``
    tokens, then linear down to ``-factor`` at ``max_length``, and ``-factor`` beyond.

    ``max_length`` may be one number or one per sample (a multi-turn turn's own budget)."""
    if not buffer >= 1:
        raise ValueError(f"overlong buffer must be >= 1 token, got {buffer}")
    if not factor >= 0:
        raise ValueError(f"overlong penalty factor must be >= 0, got {factor}")
    dtype = torch.float64 if lengths.dtype == torch.float64 else torch.float32
    limit = torch.as_tensor(max_length, dtype=dtype, device=lengths.device)
    if bool((limit < buffer).any()):
        raise ValueError(f"overlong buffer ({buffer}) must not exceed the length limit ({max_length})")
    exceed = (lengths.to(dtype) - (limit - buffer)).clamp(min=0)
    return -factor * (exceed / buffer).clamp(max=1.0)


def normalize_then_sum(components: torch.Tensor, group_size: int, weights: torch.Tensor | None = None,
                       mask: torch.Tensor | None = None, eps: float = NORM_EPS,
                       batch_normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO: ``(A_hat [B], A_k [B, K])`` from ``components [B, K]`` (module docstring).

    ``mask [B, K]`` (or ``[B]``) says where a component was scored (a reward that did not apply is
    left out of its group's statistics and contributes 0; the trainer passes a sample whose reward
    failed as invalid, every component False); ``weights [K]`` default to 1.
    A sample with no valid component gets 0. ``batch_normalize=False`` returns the weighted sum."""
    if components.dim() != 2:
        raise ValueError(f"components must be [B, K], got {tuple(components.shape)}")
    b, k = components.shape
    dtype = acc_dtype(components)
    keep = torch.ones(b, k, dtype=torch.bool, device=components.device) if mask is None else mask.bool()
    if keep.dim() == 1:
        keep = keep.unsqueeze(-1).expand(b, k)
    keep = keep & torch.isfinite(components)
    w = torch.ones(k, dtype=dtype) if weights is None else weights.to(dtype)
    zero = torch.zeros((), dtype=dtype, device=components.device)
    x = torch.where(keep, components.to(dtype), zero)
    per = torch.zeros(b, k, dtype=dtype, device=components.device)
    for j in range(k):
        mean, std = group_mean_std(x[:, j], group_size, keep[:, j])
        per[:, j] = torch.where(keep[:, j], (x[:, j] - mean) / (std + eps), zero)
    total = (per * w).sum(-1)
    any_valid = keep.any(-1)
    if batch_normalize:
        mean = masked_mean(total, any_valid)
        std = masked_var(total, any_valid).clamp(min=0).sqrt()
        total = (total - mean) / (std + eps)
    return torch.where(any_valid, total, zero), per
