"""Truncated importance sampling (TIS): correcting for the gap between the engine that sampled
the responses (vLLM) and the trainer that computes their log-probs.

The two compute the same policy with different kernels and precisions, so the sampling
distribution ``pi_rollout`` is not exactly the training policy ``pi_train``. Per token::

    w = min(exp(clamp(logp_train - logp_rollout, -10, 10)), cap)

re-weights a sampled token towards the training policy; the cap bounds the variance (the
"truncated" of TIS, Yao et al. 2025). ``logp_train`` is the trainer's log-prob of the rollout
(the ``old_logprobs`` of PPO), not the one being optimised, so ``w`` is a constant of the
update. The trainer multiplies the advantages by ``w``: for the PPO clipped loss (and its dual
clip) ``min(r A w, clip(r) A w) = w min(r A, clip(r) A)`` for ``w > 0``, so this is the
per-token loss scaled by ``w``.
"""

from __future__ import annotations

import torch

from .constants import TIS_LOG_RATIO_CLAMP
from .stats import masked_mean

__all__ = ["truncated_importance_weights", "rollout_mismatch_metrics"]


def truncated_importance_weights(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor,
                                 mask: torch.Tensor, cap: float) -> tuple[torch.Tensor, dict[str, float]]:
    """``(w [B, T], metrics)``: the TIS weights (0 on masked tokens) and, over the valid tokens,
    ``rollout/tis_weight_mean``, ``rollout/tis_clip_frac`` (fraction of tokens whose weight was
    capped) and ``rollout/logprob_diff_mean`` (mean clamped ``logp_train - logp_rollout``)."""
    if not cap > 0:
        raise ValueError(f"tis cap must be > 0, got {cap}")
    if logprobs.shape != rollout_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(f"logprobs {tuple(logprobs.shape)}, rollout_logprobs {tuple(rollout_logprobs.shape)} "
                         f"and mask {tuple(mask.shape)} must have one shape [B, T]")
    keep = mask != 0
    zero = torch.zeros((), dtype=torch.float32, device=logprobs.device)
    diff = torch.where(keep, logprobs.float() - rollout_logprobs.float(), zero)
    diff = diff.nan_to_num(nan=0.0).clamp(-TIS_LOG_RATIO_CLAMP, TIS_LOG_RATIO_CLAMP)
    ratio = diff.exp()
    weights = torch.where(keep, ratio.clamp(max=cap), zero)
    count = keep.sum().clamp(min=1).float()
    metrics = {
        "rollout/tis_weight_mean": float(masked_mean(weights, keep)),
        "rollout/tis_clip_frac": float(((ratio > cap) & keep).sum() / count),
        "rollout/logprob_diff_mean": float(masked_mean(diff, keep)),
    }
    return weights, metrics


def rollout_mismatch_metrics(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor,
                             mask: torch.Tensor) -> dict[str, float]:
    """``rollout/logprob_diff_mean`` alone, for runs with rollout log-probs and TIS off."""
    keep = mask != 0
    zero = torch.zeros((), dtype=torch.float32, device=logprobs.device)
    diff = torch.where(keep, logprobs.float() - rollout_logprobs.float(), zero)
    diff = diff.nan_to_num(nan=0.0).clamp(-TIS_LOG_RATIO_CLAMP, TIS_LOG_RATIO_CLAMP)
    return {"rollout/logprob_diff_mean": float(masked_mean(diff, keep))}
