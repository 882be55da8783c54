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

A behaviour log-prob that is NaN on a valid token (the engine lost the token's probability) says
nothing about how the token was sampled: the token gets weight 0 and leaves the loss (the caller
takes :func:`behaviour_logprob_mask` as its loss mask), and is counted in
``rollout/nan_logprob_tokens``. ``-inf`` is a number: clamped, its weight is the cap.
"""

from __future__ import annotations

import torch

from .constants import TIS_LOG_RATIO_CLAMP
from .mismatch import Correction
from .stats import masked_mean

__all__ = ["behaviour_logprob_mask", "truncated_importance_weights", "rollout_mismatch_metrics",
           "truncation_correction"]


def behaviour_logprob_mask(rollout_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` bool: the valid tokens (``mask``) whose behaviour log-prob is a number (not NaN)."""
    return (mask != 0) & ~torch.isnan(rollout_logprobs)


def _clamped_diff(logprobs, rollout_logprobs, keep) -> torch.Tensor:
    zero = torch.zeros((), dtype=torch.float32, device=logprobs.device)
    diff = torch.where(keep, logprobs.float() - rollout_logprobs.float(), zero)
    return diff.nan_to_num(nan=0.0).clamp(-TIS_LOG_RATIO_CLAMP, TIS_LOG_RATIO_CLAMP)


def truncated_importance_weights(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor,
                                 mask: torch.Tensor, cap: float) -> tuple[torch.Tensor, dict[str, float]]:
    """``(w [B, T], metrics)``: the TIS weights, 0 on masked tokens and on tokens whose behaviour
    log-prob is NaN; over the other valid tokens ``rollout/tis_weight_mean``,
    ``rollout/tis_clip_frac`` (fraction of tokens whose weight was capped) and
    ``rollout/logprob_diff_mean`` (mean clamped ``logp_train - logp_rollout``); and
    ``rollout/nan_logprob_tokens``, the valid tokens whose behaviour log-prob is NaN."""
    if not cap > 0:
        raise ValueError(f"tis cap must be > 0, got {cap}")
    if logprobs.shape != rollout_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(f"logprobs {tuple(logprobs.shape)}, rollout_logprobs {tuple(rollout_logprobs.shape)} "
                         f"and mask {tuple(mask.shape)} must have one shape [B, T]")
    keep = behaviour_logprob_mask(rollout_logprobs, mask)
    zero = torch.zeros((), dtype=torch.float32, device=logprobs.device)
    diff = _clamped_diff(logprobs, rollout_logprobs, keep)
    ratio = diff.exp()
    weights = torch.where(keep, ratio.clamp(max=cap), zero)
    count = keep.sum().clamp(min=1).float()
    metrics = {
        "rollout/tis_weight_mean": float(masked_mean(weights, keep)),
        "rollout/tis_clip_frac": float(((ratio > cap) & keep).sum() / count),
        "rollout/logprob_diff_mean": float(masked_mean(diff, keep)),
        "rollout/nan_logprob_tokens": float(((mask != 0) & ~keep).sum()),
    }
    return weights, metrics


def rollout_mismatch_metrics(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor,
                             mask: torch.Tensor) -> dict[str, float]:
    """``rollout/logprob_diff_mean`` (over the valid tokens whose behaviour log-prob is a number)
    and ``rollout/nan_logprob_tokens``, for runs with rollout log-probs and TIS off."""
    keep = behaviour_logprob_mask(rollout_logprobs, mask)
    diff = _clamped_diff(logprobs, rollout_logprobs, keep)
    return {"rollout/logprob_diff_mean": float(masked_mean(diff, keep)),
            "rollout/nan_logprob_tokens": float(((mask != 0) & ~keep).sum())}


def truncation_correction(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor,
                          cap: float) -> Correction:
    """What :func:`truncated_importance_weights` does to ``mask``'s tokens, as a
    :class:`~steadyrl.functional.mismatch.Correction` for :func:`~steadyrl.functional.mismatch_metrics`:
    a NaN behaviour log-prob drops its token; every other token is kept at ``min(w, cap)``, and counts
    as truncated where ``w > cap`` (a ``-inf`` behaviour log-prob: ``w`` is ``e^10``, so the cap)."""
    weights, _ = truncated_importance_weights(logprobs, rollout_logprobs, mask, cap)
    keep = behaviour_logprob_mask(rollout_logprobs, mask)
    given = mask != 0
    over = (_clamped_diff(logprobs, rollout_logprobs, keep).exp() > cap) & keep
    finite = torch.isfinite(logprobs.float()) & torch.isfinite(rollout_logprobs.float())
    return Correction(weights, keep, {
        "truncated": over.sum().float(),
        "masked": (given & ~keep & finite).sum().float(),
        "nonfinite": (given & ~finite).sum().float(),
        "masked_seqs": (given.any(-1) & ~keep.any(-1)).sum().float(),
    })
