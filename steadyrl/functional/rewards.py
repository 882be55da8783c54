"""Reward processing (seed 001): clipping, normalisation, the difficulty mask and weights.

Scores are per sequence, ``[B]``, with groups contiguous: rows ``g*n ... g*n+n-1`` are the ``n``
samples of prompt ``g``. Everything is computed in float32 (float64 for float64 input), so fp16
rewards are never normalised in fp16. An optional ``mask [B]`` marks valid samples (a reward
function may fail for some): invalid samples enter no statistic and come back as 0.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Literal

import torch

from .constants import (
    DIFFICULTY_HIGH,
    DIFFICULTY_LOW,
    DIFFICULTY_WEIGHT_MAX,
    DIFFICULTY_WEIGHT_MIN,
    NORM_EPS,
)
from .stats import RunningMoments, acc_dtype, masked_mean, masked_var

__all__ = [
    "NormType",
    "NORM_TYPES",
    "clip_rewards",
    "clip_fraction",
    "group_mean_std",
    "normalize_rewards",
    "normalize_rewards_by_domain",
    "difficulty_groups",
    "difficulty_mask",
    "difficulty_weights",
    "group_scores_vary",
]

NormType = Literal["batch", "group", "running", "none"]
NORM_TYPES: tuple[str, ...] = ("batch", "group", "running", "none")


def _valid(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    if mask.shape != scores.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} must equal scores shape {tuple(scores.shape)}")
    return mask if mask.dtype == torch.bool else mask != 0


def check_groups(scores: torch.Tensor, group_size: int) -> int:
    if scores.dim() != 1:
        raise ValueError(f"scores must be [B], got shape {tuple(scores.shape)}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if scores.shape[0] % group_size:
        raise ValueError(
            f"group_size={group_size} does not divide the batch of {scores.shape[0]} scores: "
            f"group_size must be a divisor of the batch size (rows g*n .. g*n+n-1 are one group)"
        )
    return scores.shape[0] // group_size


def clip_rewards(x: torch.Tensor, clip: float | None) -> torch.Tensor:
    """``clamp(x, -clip, clip)`` in float32 (seed 001); ``clip=None`` only casts."""
    x = x.to(acc_dtype(x))
    if clip is None:
        return x
    if not clip > 0:
        raise ValueError(f"clip must be > 0 or None, got {clip}")
    return x.clamp(-clip, clip)


def clip_fraction(
    x: torch.Tensor, low: float, high: float, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Fraction of valid entries of ``x`` outside ``[low, high]`` (those a clamp would change).

    Padding is not counted in the numerator or the denominator; no valid entry gives 0.
    """
    keep = _valid(x, mask)
    outside = ((x < low) | (x > high)) & keep
    return outside.sum().to(torch.float32) / keep.sum().clamp(min=1).to(torch.float32)


def group_mean_std(
    scores: torch.Tensor, group_size: int, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample group mean and unbiased group std, ``[B]`` each, over the group's valid samples.

    A group with one valid sample has std 0 (not NaN); a group with none has mean 0 and std 0.
    """
    groups = check_groups(scores, group_size)
    keep = _valid(scores, mask).reshape(groups, group_size)
    s = scores.reshape(groups, group_size)
    mean = masked_mean(s, keep, dim=1)
    std = masked_var(s, keep, unbiased=True, dim=1).clamp(min=0).sqrt()
    return mean.repeat_interleave(group_size), std.repeat_interleave(group_size)


def normalize_rewards(
    scores: torch.Tensor,
    group_size: int,
    mean_type: NormType = "group",
    std_type: NormType = "group",
    running: RunningMoments | None = None,
    eps: float = NORM_EPS,
    mask: torch.Tensor | None = None,
    return_scale: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``(scores - mean) / (std + eps)`` with the mean and std each taken per ``batch``, per
    ``group``, from ``running`` statistics, or not at all (``none``: mean 0, no division).

    ``eps`` is 1e-6 (seed 000). Stds are unbiased. GRPO is ``mean_type="group", std_type="group"``.
    With ``running`` the valid scores are merged into the given :class:`RunningMoments` first
    (once, even when both types are ``running``), then its mean and std are used. Returns
    float32 ``[B]``; invalid samples (``mask`` False) come back 0. With ``return_scale`` also the
    map's slope per sample, ``[B]``: ``1 / (std + eps)`` (1 with ``std_type="none"``; 0 for an
    invalid sample), the factor by which a part of a score is scaled (the mean is a shift).
    """
    for name, value in (("mean_type", mean_type), ("std_type", std_type)):
        if value not in NORM_TYPES:
            raise ValueError(f"{name} {value!r} is not one of {NORM_TYPES}")
    check_groups(scores, group_size)
    keep = _valid(scores, mask)
    x = scores.to(acc_dtype(scores))
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    if "running" in (mean_type, std_type):
        if running is None:
            raise ValueError(
                "normalize_rewards: mean_type/std_type 'running' needs a RunningMoments "
                "passed as running=..."
            )
        running.update(x, keep)

    if mean_type == "batch":
        mean = masked_mean(x, keep)
    elif mean_type == "group":
        mean, _ = group_mean_std(x, group_size, keep)
    elif mean_type == "running":
        mean = torch.tensor(running.mean, dtype=x.dtype, device=x.device)
    else:
        mean = zero

    if std_type == "batch":
        std = masked_var(x, keep).clamp(min=0).sqrt()
    elif std_type == "group":
        _, std = group_mean_std(x, group_size, keep)
    elif std_type == "running":
        std = torch.tensor(running.std, dtype=x.dtype, device=x.device)
    else:
        std = None

    out = x - mean if std is None else (x - mean) / (std + eps)
    out = torch.where(keep, out, zero)
    if not return_scale:
        return out
    scale = torch.ones_like(x) if std is None else (1.0 / (std + eps)).expand_as(x)
    return out, torch.where(keep, scale, zero)


def normalize_rewards_by_domain(
    scores: torch.Tensor,
    domains: torch.Tensor,
    group_size: int,
    mean_type: NormType = "batch",
    std_type: NormType = "batch",
    eps: float = NORM_EPS,
    mask: torch.Tensor | None = None,
    return_scale: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """:func:`normalize_rewards` applied to each domain's samples on their own.

    ``domains [B]`` is an integer id per sample (the same for a whole group). For every id ``d``::

        out_i = (x_i - mean_d) / (std_d + eps)    for i with domains_i = d and mask_i

    ``mean_d`` / ``std_d`` taken over the valid samples of domain ``d`` (``batch``), or of the
    sample's group (``group``: a group lies in one domain, so this equals plain group
    normalisation). ``running`` statistics are not kept per domain and are refused. A domain with
    one valid sample has std 0 (its output is 0 with a batch mean), a domain whose rewards are
    all equal gives 0s, a domain with no valid sample contributes nothing: never NaN. Returns
    float32 ``[B]`` (float64 for float64 input); invalid samples come back 0. ``return_scale``:
    also each sample's slope ``1 / (std_d + eps)``, as :func:`normalize_rewards` gives it.
    """
    if "running" in (mean_type, std_type):
        raise ValueError("normalize_rewards_by_domain: 'running' statistics are not kept per domain; "
                         "use 'batch', 'group' or 'none'")
    if domains.shape != scores.shape:
        raise ValueError(f"domains shape {tuple(domains.shape)} must equal scores shape {tuple(scores.shape)}")
    check_groups(scores, group_size)
    keep = _valid(scores, mask)
    x = scores.to(acc_dtype(scores))
    out, scale = torch.zeros_like(x), torch.zeros_like(x)
    for d in torch.unique(domains).tolist():
        rows = keep & (domains == d)
        if bool(rows.any()):  # normalize_rewards gives 0 outside ``rows``: the domains' parts add up
            part, slope = normalize_rewards(x, group_size, mean_type, std_type, eps=eps, mask=rows, return_scale=True)
            out, scale = out + part, scale + slope
    return (out, scale) if return_scale else out


def _group_accuracy(scores: torch.Tensor, group_size: int, mask: torch.Tensor | None) -> torch.Tensor:
    mean, _ = group_mean_std(scores.to(acc_dtype(scores)), group_size, mask)
    return mean


def _mean_minus(values: list[float], threshold: float) -> int:
    """The sign (-1, 0 or 1) of ``mean(values) - threshold``, exactly: no rounding decides it.

    ``sum(values - threshold)`` is summed exactly by :func:`math.fsum` (whose correctly rounded
    result is 0 only when the exact sum is), or, when partial sums leave the float range, in
    rationals. A float mean ``sum / n`` is not exact: three 0.1s have mean 0.10000000000000002.
    """
    if math.isinf(threshold):
        return -1 if threshold > 0 else 1
    try:
        total = math.fsum([*values, *([-threshold] * len(values))])
    except OverflowError:
        total = sum(map(Fraction, values)) - Fraction(threshold) * len(values)
    return (total > 0) - (total < 0)


def difficulty_groups(
    scores: torch.Tensor,
    group_size: int,
    low: float = DIFFICULTY_LOW,
    high: float = DIFFICULTY_HIGH,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[G]`` bool: the groups seed 001's difficulty rule keeps, one rule for the difficulty mask
    (:func:`difficulty_mask`) and dynamic sampling's ``difficulty`` filter::

        keep_g = group_size == 1  or  (g has a valid sample  and  low < mean_g < high)

    ``mean_g`` is the exact mean of the group's valid scores, as given (float32 scores compare
    with the thresholds rounded to float32, as a tensor comparison would): a mean on a threshold
    is out however its float rounding falls. A group of one says nothing about difficulty and is
    kept (as in ROLL); a larger group with no valid sample has nothing to train on and is not.
    """
    if not low < high:
        raise ValueError(f"difficulty mask needs low < high, got low={low}, high={high}")
    groups = check_groups(scores, group_size)
    if group_size == 1:
        return torch.ones(groups, dtype=torch.bool, device=scores.device)
    x = scores.detach().to(acc_dtype(scores))
    lo, hi = (float(torch.tensor(v, dtype=x.dtype)) for v in (low, high))
    keep = _valid(scores, mask).reshape(groups, group_size).tolist()
    kept = []
    for row, ok in zip(x.reshape(groups, group_size).tolist(), keep):
        values = [v for v, k in zip(row, ok) if k]
        kept.append(bool(values) and _mean_minus(values, lo) > 0 and _mean_minus(values, hi) < 0)
    return torch.tensor(kept, dtype=torch.bool, device=scores.device)


def difficulty_mask(
    scores: torch.Tensor,
    group_size: int,
    low: float = DIFFICULTY_LOW,
    high: float = DIFFICULTY_HIGH,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[B]`` bool: keep a sample when its group is neither too hard nor too easy,
    ``low < group mean score < high`` (defaults 0.1 and 0.95, seed 001), compared exactly
    (:func:`difficulty_groups`, the rule for each group).

    Groups of one are always kept: one sample says nothing about difficulty (as in ROLL).
    """
    return difficulty_groups(scores, group_size, low, high, mask).repeat_interleave(group_size)


def group_scores_vary(scores: torch.Tensor, group_size: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``[G]`` bool: the group has two valid scores that differ, ``max_g > min_g`` over its valid
    scores, compared exactly. Otherwise every GRPO-style advantage of the group is exactly 0
    (no signal). A float mean would not do: three 0.1s have mean 0.10000000000000002, so
    ``score - mean`` is not 0 although the scores are equal.
    """
    groups = check_groups(scores, group_size)
    keep = _valid(scores, mask).reshape(groups, group_size)
    s = scores.detach().reshape(groups, group_size)
    inf = torch.full((), float("inf"), dtype=s.dtype, device=s.device)
    high = torch.where(keep, s, -inf).amax(-1)
    low = torch.where(keep, s, inf).amin(-1)
    return (keep.sum(-1) >= 2) & (high > low)


def difficulty_weights(
    scores: torch.Tensor,
    group_size: int,
    min_weight: float = DIFFICULTY_WEIGHT_MIN,
    max_weight: float = DIFFICULTY_WEIGHT_MAX,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-sample loss weights ``min + (max - min) * (1 - clamp(group mean score, 0, 1))``.

    Harder groups weigh more: accuracy 0 gives ``max_weight`` (2.0), accuracy 1 gives
    ``min_weight`` (0.5), so the hardest sample weighs up to 4x the easiest (seed 001).
    Scores are read as accuracies in [0, 1]. Returns float32 ``[B]``.
    """
    if not 0 <= min_weight <= max_weight:
        raise ValueError(
            f"difficulty weights need 0 <= min_weight <= max_weight, got {min_weight}, {max_weight}"
        )
    acc = _group_accuracy(scores, group_size, mask).clamp(0.0, 1.0)
    return min_weight + (max_weight - min_weight) * (1.0 - acc)
