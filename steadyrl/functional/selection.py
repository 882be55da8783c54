"""Which policy tokens carry the policy gradient: entropy and covariance selections.

Three published selections, each a pure function of ``[B, T]`` tensors and a mask:

* **High-entropy tokens** (Wang et al., "Beyond the 80/20 rule", arXiv 2506.01939; TRL's
  ``top_entropy_quantile``): only the tokens whose entropy is at or above the ``1 - rho`` quantile of
  the batch's policy-token entropies carry the gradient, ``rho`` in (0, 1]; ``rho = 1`` keeps all.
* **KL-Cov** (Cui et al., "The Entropy Mechanism of RL for Reasoning LMs", arXiv 2505.22617): the
  ``k = max(1, floor(ratio * N))`` tokens of largest centred covariance
  ``cov_t = (A_t - mean A) * (logp_t - mean logp)`` get a ``|log r_t|`` penalty: exactly ``k``, as
  verl's ``topk`` takes them, also when covariances tie (equal advantages make every one 0).
* **Clip-Cov** (same paper): ``k`` tokens drawn at random among those with
  ``lb < cov_t < ub`` lose their gradient (exactly ``k``, or every candidate when fewer).

Exactly ``k`` (:func:`exact_top`): every token strictly beyond the ``k``-th value, and of the tokens
equal to it the first ``ties`` in row-major order, ``ties = k - #(beyond)``. (verl's ``topk`` picks
among tied tokens in an order torch leaves unspecified; the count, and so the loss value, are the same.)

The means, the quantile and the top-k are taken over every valid token given. To make a selection
independent of how a batch is split into micro-batches and data-parallel ranks, the trainer takes
them over the whole global batch and passes the resulting ``threshold`` (or means) back in; called
alone, each function is its paper's per-batch rule. Everything runs in float32 (float64 for float64
input); padding never enters a mean, a quantile or a count, and no input gives NaN.
"""

from __future__ import annotations

import torch

from .stats import acc_dtype, masked_mean

__all__ = [
    "masked_quantile",
    "top_count",
    "top_count_threshold",
    "exact_top",
    "high_entropy_mask",
    "token_covariance",
    "kl_cov_select",
    "clip_cov_candidates",
    "random_subset",
]


def _keep(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def _valid_values(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The valid, finite entries of ``x`` as a 1-D tensor in the accumulation dtype."""
    keep = _keep(mask) & torch.isfinite(x)
    return x.to(acc_dtype(x))[keep]


def masked_quantile(x: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """The ``q`` quantile of ``x``'s valid finite entries, linearly interpolated between order
    statistics (``torch.quantile``'s default): position ``q * (n - 1)`` of the sorted values.
    No valid entry gives ``+inf`` (a threshold nothing reaches). Sort-based, so any size works."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be in [0, 1], got {q}")
    values = torch.sort(_valid_values(x, mask)).values
    if values.numel() == 0:
        return torch.tensor(float("inf"), dtype=acc_dtype(x), device=x.device)
    pos = q * (values.numel() - 1)
    lo = int(pos)
    hi = min(lo + 1, values.numel() - 1)
    frac = pos - lo
    return values[lo] + (values[hi] - values[lo]) * frac


def top_count(n: int, ratio: float) -> int:
    """``max(1, floor(ratio * n))`` tokens of ``n`` (0 when there are none), as verl counts them."""
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    return 0 if n == 0 else max(1, int(ratio * n))


def top_count_threshold(x: torch.Tensor, mask: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count``-th largest valid finite entry of ``x`` (``+inf`` when ``count`` is 0 or there
    is no valid entry): ``x >= threshold`` selects the top ``count`` (more on ties)."""
    values = _valid_values(x, mask)
    if count <= 0 or values.numel() == 0:
        return torch.tensor(float("inf"), dtype=acc_dtype(x), device=x.device)
    return torch.topk(values, min(count, values.numel())).values[-1]


def exact_top(x: torch.Tensor, mask: torch.Tensor, count: int, threshold: torch.Tensor | float | None = None,
              ties: int | None = None, *, largest: bool = True) -> torch.Tensor:
    """``[B, T]`` bool: exactly ``count`` valid finite entries of ``x``, the largest (or smallest)
    (all of them when there are fewer): those strictly beyond ``threshold`` (``x > threshold``, or
    ``<`` for the smallest) plus the first ``ties`` entries equal to it, in row-major order.

    Alone, ``threshold`` is the ``count``-th largest (smallest) value and ``ties = count - #beyond``.
    The trainer passes both, computed over the whole batch and every rank (each rank its own share
    of the ties), so the selection does not depend on the micro-batch split."""
    keep = _keep(mask) & torch.isfinite(x)
    xs = x.to(acc_dtype(x))
    sign = 1.0 if largest else -1.0
    if threshold is None:
        threshold = sign * top_count_threshold(sign * xs, keep, count)
    threshold = torch.as_tensor(threshold, dtype=xs.dtype, device=xs.device)
    beyond = keep & ((xs > threshold) if largest else (xs < threshold))
    tied = keep & (xs == threshold)
    if ties is None:
        ties = max(count - int(beyond.sum()), 0)
    first = tied.reshape(-1).long().cumsum(0).reshape(tied.shape) <= ties
    return beyond | (tied & first)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, top_quantile: float,
                      threshold: torch.Tensor | float | None = None) -> torch.Tensor:
    """``[B, T]`` bool: valid tokens whose entropy is ``>=`` the ``1 - top_quantile`` quantile of the
    valid entropies (or ``>= threshold`` when given: the global batch's). ``top_quantile = 1`` keeps
    every valid token; a non-finite entropy is never selected (except with ``top_quantile = 1``)."""
    if not 0.0 < top_quantile <= 1.0:
        raise ValueError(f"top_quantile must be in (0, 1], got {top_quantile}")
    keep = _keep(mask)
    if top_quantile == 1.0:
        return keep.clone()
    if threshold is None:
        threshold = masked_quantile(entropy, keep, 1.0 - top_quantile)
    return keep & torch.isfinite(entropy) & (entropy.to(acc_dtype(entropy)) >= threshold)


def token_covariance(advantages: torch.Tensor, logprobs: torch.Tensor, mask: torch.Tensor,
                     adv_mean: torch.Tensor | float | None = None,
                     logp_mean: torch.Tensor | float | None = None) -> torch.Tensor:
    """``cov_t = (A_t - mean A) * (logp_t - mean logp)`` on valid tokens, 0 elsewhere (detached).

    The means are over the valid tokens given, or the ones passed (the global batch's). A non-finite
    log-prob or advantage on a valid token gives covariance 0 there and stays out of the means."""
    keep = _keep(mask) & torch.isfinite(advantages) & torch.isfinite(logprobs)
    dtype = torch.float64 if torch.float64 in (advantages.dtype, logprobs.dtype) else torch.float32
    zero = torch.zeros((), dtype=dtype, device=advantages.device)
    a = torch.where(keep, advantages.detach().to(dtype), zero)
    lp = torch.where(keep, logprobs.detach().to(dtype), zero)
    a_mean = masked_mean(a, keep) if adv_mean is None else torch.as_tensor(adv_mean, dtype=dtype)
    l_mean = masked_mean(lp, keep) if logp_mean is None else torch.as_tensor(logp_mean, dtype=dtype)
    return torch.where(keep, (a - a_mean) * (lp - l_mean), zero)


def kl_cov_select(cov: torch.Tensor, mask: torch.Tensor, ratio: float,
                  threshold: torch.Tensor | float | None = None, ties: int | None = None) -> torch.Tensor:
    """``[B, T]`` bool: exactly ``k = max(1, floor(ratio * N))`` valid tokens of largest covariance
    (:func:`exact_top`; ``threshold`` and ``ties`` when the global batch's are given)."""
    keep = _keep(mask)
    return exact_top(cov, keep, top_count(int(keep.sum()), ratio), threshold, ties)


def clip_cov_candidates(cov: torch.Tensor, mask: torch.Tensor, lb: float, ub: float) -> torch.Tensor:
    """``[B, T]`` bool: valid tokens with ``lb < cov < ub``, those Clip-Cov may draw."""
    if not lb < ub:
        raise ValueError(f"clip_cov_lb ({lb}) must be < clip_cov_ub ({ub})")
    return _keep(mask) & (cov > lb) & (cov < ub)


def random_subset(candidates: torch.Tensor, count: int, keys: torch.Tensor,
                  threshold: torch.Tensor | float | None = None, ties: int | None = None) -> torch.Tensor:
    """``[B, T]`` bool: ``count`` of the ``candidates`` drawn uniformly without replacement, as those
    with the smallest random ``keys`` (uniform in [0, 1), one per token; :func:`exact_top`, with the
    global draw's ``threshold`` and ``ties`` when given). All candidates when there are fewer."""
    if keys.shape != candidates.shape:
        raise ValueError(f"keys {tuple(keys.shape)} must have the candidates' shape {tuple(candidates.shape)}")
    return exact_top(keys, candidates, count, threshold, ties, largest=False)
