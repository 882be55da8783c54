"""Training-inference mismatch: correcting it (truncate, mask, geometric mask) and measuring it.

The engine that samples (vLLM, SGLang, HF generate in another precision) and the trainer that
computes log-probs run the same policy through different kernels, so the sampling distribution
``pi_rollout`` is not the trained one ``pi_train``. Per valid token, with ``d`` the difference

    d_t = clamp(logp_train_t - logp_rollout_t, -40, 40)          (seed 002, float32 or wider)
    D_t = logp_train_t - logp_rollout_t                          (unclamped, summed in float64)

the importance ratio of the token, of the sequence and its geometric mean are

    token      w_t   = exp(clamp(d_t, -10, 10))                   (as TIS: TIS_LOG_RATIO_CLAMP)
    sequence   W     = exp(clamp(sum_t D_t, -20, 20))            (SEQ_LOG_RATIO_CLAMP)
    geometric  G     = exp(clamp(mean_t D_t, -40, 40))

The sums are of the raw differences, clamped after summing (as verl): clamping each token first
would turn a sequence of true ratio ``e^-30`` (tokens ``+60, -90``) into ``e^0``. A mask compares the
unclamped log-ratio (``d_t``, ``sum_t D_t``, ``mean_t D_t``) with its bounds, so bounds at the allowed
limit (``e^10`` for a token) still drop a ratio beyond them (``e^15``); only the weight is clamped.

Corrections, each a mode in :data:`CORRECTION_MODES` (name -> function, filled by
:func:`register_correction`), applied at one ``level`` (``"token"`` uses ``w_t``, ``"sequence"``
uses ``W`` for every token of the sequence):

* ``truncate`` (TIS, Yao et al. 2025): weight ``min(w, cap)``; counted as truncated where ``w > cap``.
* ``mask`` (MIS, IcePop): a token (sequence) whose ratio leaves ``[low, high]`` is dropped from the
  loss and counted; a kept one is weighted by its ratio ``w`` (bounded by ``high``), unless
  ``truncate`` is also on, whose ``min(w, cap)`` then weighs it.
* ``reject`` (verl's rejection sampling, ``rollout_rs``): the drops of ``mask``, the kept tokens at
  weight 1 (it sets no weight).
* ``geo_mask`` (geometric sequence mask): a sequence whose ``G`` leaves ``[low, high]`` is dropped
  whole, whatever ``level``; it sets no weight (a pure filter).

Modes combine: the kept set is the intersection of every mode's, the weight is ``truncate``'s if it
is on, else ``mask``'s ratio if it is on, else that of another registered mode that sets one, else
1. A valid token whose behaviour (or train) log-prob is NaN or inf is never weighted 1: it is
dropped and counted (``nonfinite_tokens``); at sequence level, and for ``geo_mask``, its whole
sequence is dropped, since the sequence's ratio is unknown.

:func:`mismatch_metrics` measures the gap over the valid (policy) tokens: ``k1`` and ``k3``
estimates of ``KL(rollout || train)`` (samples are the rollout's, ``r = exp(d)``: ``k1 = -d``,
``k3 = r - 1 - log r``, clamped to [-10, 10] as seed 000), the perplexity of each policy, their
ratio, the normalised effective sample size of the token ratios, their max and min, and the
fractions the correction truncated or masked.

Nothing here detaches: the trainer passes the log-probs of the rollout (``old_logprobs``), which
carry no gradient, so the weights are constants of the update. Gradients that do flow are finite
for any input (non-finite entries are replaced before any arithmetic).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

from .constants import (
    K3_VALUE_CLAMP,
    LOGPROB_DIFF_CLAMP,
    LOGPROB_SUM_BOUND,
    MASK_EPS,
    PPL_LOG_CLAMP,
    SEQ_LOG_RATIO_CLAMP,
    TIS_LOG_RATIO_CLAMP,
)
from .stats import acc_dtype

__all__ = [
    "CORRECTION_LEVELS",
    "CORRECTION_MODES",
    "Correction",
    "MismatchRatios",
    "ModeResult",
    "correct_mismatch",
    "mismatch_metrics",
    "mismatch_ratios",
    "register_correction",
]

CORRECTION_LEVELS = ("token", "sequence")


class MismatchRatios(NamedTuple):
    """The ratios every mode reads (see the module doc); all in float32 (float64 for float64 input)."""

    diff: torch.Tensor       # [B, T] d_t on valid tokens, 0 elsewhere
    valid: torch.Tensor      # [B, T] bool: mask and both log-probs finite
    nonfinite: torch.Tensor  # [B, T] bool: mask but a log-prob is NaN or inf
    seq_ok: torch.Tensor     # [B] bool: the sequence has a valid token and no non-finite one
    token_log: torch.Tensor  # [B, T] clamp(d_t, -10, 10)
    seq_log: torch.Tensor    # [B] clamp(sum_t D_t, -20, 20)
    geo_log: torch.Tensor    # [B] clamp(mean_t D_t, -40, 40)
    seq_sum: torch.Tensor    # [B] float64: sum_t D_t, unclamped (finite: see LOGPROB_SUM_BOUND)
    geo_mean: torch.Tensor   # [B] float64: mean_t D_t, unclamped


class ModeResult(NamedTuple):
    """What one mode does: a weight ``[B, T]`` (or None: it sets none), the tokens it keeps
    ``[B, T]`` (or None: it drops none), and the valid tokens it acted on (truncated or dropped)."""

    weight: torch.Tensor | None
    keep: torch.Tensor | None
    hit: torch.Tensor


class Correction(NamedTuple):
    """The result of :func:`correct_mismatch`: ``weights`` ``[B, T]`` (0 on every token not kept),
    ``keep`` ``[B, T]`` bool (tokens that stay in the loss: multiply the loss mask by it), and
    ``counts``: ``truncated`` (kept tokens whose weight hit the cap), ``masked`` (finite policy tokens
    dropped: by a mask, or at sequence level for a non-finite token in their sequence), ``nonfinite``
    policy tokens and ``masked_seqs`` (sequences with a policy token that lost every one), float32."""

    weights: torch.Tensor
    keep: torch.Tensor
    counts: dict[str, torch.Tensor]


WEIGHT_ORDER = ("truncate", "mask")
"""Which mode's weight applies when several set one: ``truncate``, then ``mask``, then any other
registered mode in the order given."""

CorrectionFn = Callable[..., ModeResult]
CORRECTION_MODES: dict[str, CorrectionFn] = {}
"""Mode name -> ``fn(ratios, level, **params) -> ModeResult``."""


def register_correction(name: str):
    """Decorator: register a correction mode under ``name``."""

    def wrap(fn: CorrectionFn) -> CorrectionFn:
        if name in CORRECTION_MODES:
            raise ValueError(f"correction mode {name!r} is already registered")
        CORRECTION_MODES[name] = fn
        return fn

    return wrap


def mismatch_ratios(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor) -> MismatchRatios:
    """The token, sequence and geometric log-ratios of ``logprobs`` (train) against
    ``rollout_logprobs`` (behaviour) over ``mask`` (policy tokens), see the module doc."""
    if logprobs.shape != rollout_logprobs.shape or logprobs.shape != mask.shape or logprobs.dim() != 2:
        raise ValueError(f"logprobs {tuple(logprobs.shape)}, rollout_logprobs {tuple(rollout_logprobs.shape)} "
                         f"and mask {tuple(mask.shape)} must have one shape [B, T]")
    dtype = acc_dtype(logprobs)
    lp, rlp = logprobs.to(dtype), rollout_logprobs.to(dtype)
    given = mask if mask.dtype == torch.bool else mask != 0
    finite = torch.isfinite(lp) & torch.isfinite(rlp)
    valid, nonfinite = given & finite, given & ~finite
    zero = torch.zeros((), dtype=dtype, device=lp.device)
    # replace before subtracting: inf - inf is NaN, and a NaN in an unselected branch of a where
    # still poisons the gradient
    raw = torch.where(valid, lp, zero) - torch.where(valid, rlp, zero)
    diff = raw.clamp(-LOGPROB_DIFF_CLAMP, LOGPROB_DIFF_CLAMP)
    count = valid.sum(-1)
    seq_ok = (count > 0) & ~nonfinite.any(-1)
    # the sequence's sum of the raw differences, then the clamp (module doc); float64 holds any
    # float32 difference exactly enough, and the bound keeps a float64 input's sum finite
    wide = torch.zeros((), dtype=torch.float64, device=lp.device)
    seq_sum = (torch.where(valid, logprobs.double().clamp(-LOGPROB_SUM_BOUND, LOGPROB_SUM_BOUND), wide)
               - torch.where(valid, rollout_logprobs.double().clamp(-LOGPROB_SUM_BOUND, LOGPROB_SUM_BOUND), wide)
               ).sum(-1)
    geo_mean = seq_sum / count.clamp(min=1).double()
    seq_log = seq_sum.clamp(-SEQ_LOG_RATIO_CLAMP, SEQ_LOG_RATIO_CLAMP).to(dtype)
    geo_log = geo_mean.clamp(-LOGPROB_DIFF_CLAMP, LOGPROB_DIFF_CLAMP).to(dtype)
    return MismatchRatios(diff, valid, nonfinite, seq_ok, diff.clamp(-TIS_LOG_RATIO_CLAMP, TIS_LOG_RATIO_CLAMP),
                          seq_log, geo_log, seq_sum, geo_mean)


def _level_log(ratios: MismatchRatios, level: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(log weight [B, T], unclamped log ratio [B, T], tokens it is defined on [B, T])`` at
    ``level``: the weight's log is clamped, the bounds compare the unclamped one; a sequence's ratio
    is broadcast to its tokens, and defined only where the whole sequence is (``seq_ok``)."""
    if level == "token":
        return ratios.token_log, ratios.diff, ratios.valid
    return (ratios.seq_log.unsqueeze(-1).expand_as(ratios.diff), ratios.seq_sum.unsqueeze(-1).expand_as(ratios.diff),
            ratios.valid & ratios.seq_ok.unsqueeze(-1))


def _check_bounds(name: str, low: float, high: float, limit: float) -> None:
    lo, hi = math.exp(-limit), math.exp(limit)
    if not (lo <= low < high <= hi):
        raise ValueError(f"{name}: need {lo:.3g} <= low < high <= {hi:.3g} (ratios are resolved in that range), "
                         f"got low={low}, high={high}")


@register_correction("truncate")
def tis_truncate(ratios: MismatchRatios, level: str, cap: float) -> ModeResult:
    """TIS: weight ``min(w, cap)`` on the tokens where the ratio is defined; hit where ``w > cap``."""
    limit = TIS_LOG_RATIO_CLAMP if level == "token" else SEQ_LOG_RATIO_CLAMP
    if not (isinstance(cap, (int, float)) and 0 < cap <= math.exp(limit)):
        raise ValueError(f"truncate: cap must be in (0, {math.exp(limit):.3g}], got {cap!r}")
    log_w, log_r, defined = _level_log(ratios, level)
    over = defined & (log_r > math.log(cap))
    zero = torch.zeros((), dtype=log_w.dtype, device=log_w.device)
    weight = torch.where(defined, log_w.exp().clamp(max=cap), zero)
    return ModeResult(weight, defined, over)


@register_correction("mask")
def ratio_mask(ratios: MismatchRatios, level: str, low: float, high: float) -> ModeResult:
    """MIS / IcePop: keep tokens (sequences) whose ratio is in ``[low, high]``, weighted by it."""
    _check_bounds("mask", low, high, TIS_LOG_RATIO_CLAMP if level == "token" else SEQ_LOG_RATIO_CLAMP)
    log_w, log_r, defined = _level_log(ratios, level)
    inside = (log_r >= math.log(low)) & (log_r <= math.log(high))
    keep = defined & inside
    zero = torch.zeros((), dtype=log_w.dtype, device=log_w.device)
    return ModeResult(torch.where(keep, log_w.exp(), zero), keep, defined & ~inside)


@register_correction("reject")
def ratio_reject(ratios: MismatchRatios, level: str, low: float, high: float) -> ModeResult:
    """Rejection (verl's ``rollout_rs``): the drops of :func:`ratio_mask`, the kept tokens at
    weight 1 (it sets no weight: ``truncate``'s applies when it is on)."""
    masked = ratio_mask(ratios, level, low, high)
    return ModeResult(None, masked.keep, masked.hit)


@register_correction("geo_mask")
def geometric_mask(ratios: MismatchRatios, level: str, low: float, high: float) -> ModeResult:
    """Geometric sequence mask: drop every token of a sequence whose ``exp(mean_t d_t)`` leaves
    ``[low, high]`` (``level`` is ignored: the test is per sequence). Sets no weight."""
    _check_bounds("geo_mask", low, high, LOGPROB_DIFF_CLAMP)
    inside = (ratios.geo_mean >= math.log(low)) & (ratios.geo_mean <= math.log(high)) & ratios.seq_ok
    keep = ratios.valid & inside.unsqueeze(-1)
    return ModeResult(None, keep, ratios.valid & ~keep)


def correct_mismatch(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor, *,
                     level: str = "token", modes: dict[str, dict] | None = None) -> Correction:
    """Correct the gap between ``logprobs`` (train, ``[B, T]``) and ``rollout_logprobs``
    (behaviour) over ``mask`` (policy tokens; observation tokens 0).

    ``modes`` maps mode names to their parameters, e.g. ``{"truncate": {"cap": 2.0}}`` (TIS),
    ``{"mask": {"low": 0.5, "high": 5.0}}`` (IcePop), ``{"geo_mask": {"low": 0.999, "high": 1.001},
    "truncate": {"cap": 2.0}}``; none = no correction (weight 1 on valid tokens, non-finite ones
    still dropped). The weights multiply the per-token loss (or the advantages); ``keep``
    multiplies the loss mask. Raises ``ValueError`` naming an unknown level, mode or bad parameter.
    """
    if level not in CORRECTION_LEVELS:
        raise ValueError(f"correction level {level!r} is not one of {list(CORRECTION_LEVELS)}")
    modes = dict(modes or {})
    unknown = sorted(set(modes) - set(CORRECTION_MODES))
    if unknown:
        raise ValueError(f"correction mode(s) {unknown} not among {sorted(CORRECTION_MODES)}")
    ratios = mismatch_ratios(logprobs, rollout_logprobs, mask)
    results = {}
    for name, params in modes.items():
        try:
            results[name] = CORRECTION_MODES[name](ratios, level, **params)
        except TypeError as exc:
            raise ValueError(f"correction mode {name!r}: bad parameters {params!r} ({exc})") from None
    keep = ratios.valid if level == "token" else ratios.valid & ratios.seq_ok.unsqueeze(-1)
    for result in results.values():
        if result.keep is not None:
            keep = keep & result.keep
    dtype = ratios.diff.dtype
    weight = torch.ones_like(ratios.diff)
    for name in sorted(results, key=lambda n: WEIGHT_ORDER.index(n) if n in WEIGHT_ORDER else len(WEIGHT_ORDER)):
        if results[name].weight is not None:  # the first mode that sets a weight wins (module doc)
            weight = results[name].weight
            break
    weights = torch.where(keep, weight, torch.zeros((), dtype=dtype, device=weight.device))
    given = ratios.valid | ratios.nonfinite
    has_policy = given.any(-1)
    counts = {
        "truncated": (results["truncate"].hit & keep).sum().float() if "truncate" in results
        else torch.zeros((), device=keep.device),
        "masked": (given & ~keep & ~ratios.nonfinite).sum().float(),
        "nonfinite": ratios.nonfinite.sum().float(),
        "masked_seqs": (has_policy & ~keep.any(-1)).sum().float(),
    }
    return Correction(weights, keep, counts)


def mismatch_metrics(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor,
                     correction: Correction | None = None, prefix: str = "mismatch/") -> dict[str, torch.Tensor]:
    """The gap between the two policies over ``mask`` (policy tokens), as 0-d float tensors.

    * ``k1``, ``k3``: ``KL(rollout || train)`` per token, token mean: ``k1 = -d``,
      ``k3 = clamp(expm1(d) - d, -10, 10)`` (``d`` clamped to [-40, 40] first);
    * ``ppl_rollout``, ``ppl_train``: per sequence ``exp(-mean_t logp)``, the mean NLL clamped to
      [-40, 40]; averaged over sequences with a valid token; ``ppl_ratio``: the mean over those
      sequences of ``ppl_train / ppl_rollout = exp(-mean_t d_t)`` (1 = no gap);
    * ``ess``: ``(sum w)^2 / (n sum w^2)`` of the token ratios ``w_t``, in ``[1/n, 1]`` (1 = all equal);
    * ``ratio_max``, ``ratio_min``: of the token ratios;
    * ``truncated_frac``, ``masked_token_frac``: over policy tokens, from ``correction`` (what was
      done to the loss: the kept tokens whose weight hit the cap, the tokens that left the loss);
      ``masked_seq_frac``: sequences with a policy token that lost every one; all 0 with no
      ``correction`` (nothing was dropped); ``nonfinite_tokens``: policy tokens with a NaN or inf
      log-prob (a measurement: :func:`correct_mismatch` drops them, no correction trains them).

    With no valid token every value is the neutral one (KL 0, ratios and ESS 1, fractions 0).
    The values are a measurement, never a loss term: they are computed from detached inputs (a
    perplexity's gradient is ``exp(40)`` at the clamp, beyond what fp16 can hold).
    """
    logprobs, rollout_logprobs = logprobs.detach(), rollout_logprobs.detach()
    r = mismatch_ratios(logprobs, rollout_logprobs, mask)
    dtype, dev = r.diff.dtype, r.diff.device
    zero, one = torch.zeros((), dtype=dtype, device=dev), torch.ones((), dtype=dtype, device=dev)
    n = r.valid.sum().to(dtype)
    denom = n + MASK_EPS
    k3 = (torch.expm1(r.diff) - r.diff).clamp(-K3_VALUE_CLAMP, K3_VALUE_CLAMP)
    out = {"k1": torch.where(r.valid, -r.diff, zero).sum() / denom,
           "k3": torch.where(r.valid, k3, zero).sum() / denom}
    out.update(_perplexities(logprobs, rollout_logprobs, r))
    w = torch.where(r.valid, r.token_log.exp(), zero)
    has = n > 0
    top = torch.where(r.valid, w, zero).amax() if r.valid.numel() else one
    scaled = w / torch.where(has, top, one)  # in [0, 1]: the squares cannot overflow
    ess = scaled.sum().square() / (n * scaled.square().sum() + MASK_EPS)
    out["ess"] = torch.where(has, ess.clamp(max=1.0), one)
    out["ratio_max"] = torch.where(has, top, one)
    low = torch.where(r.valid, w, torch.full((), float("inf"), dtype=dtype, device=dev))
    out["ratio_min"] = torch.where(has, low.amin() if low.numel() else one, one)
    given = (r.valid | r.nonfinite)
    n_given, n_seq = given.sum().float(), given.any(-1).sum().float()
    counts = correction.counts if correction is not None else {}
    none = torch.zeros((), dtype=torch.float32, device=dev)
    out["truncated_frac"] = counts.get("truncated", none) / (n_given + MASK_EPS)
    dropped = (given & ~correction.keep).sum().float() if correction is not None else none
    out["masked_token_frac"] = dropped / (n_given + MASK_EPS)
    out["masked_seq_frac"] = counts.get("masked_seqs", none) / (n_seq + MASK_EPS)
    out["nonfinite_tokens"] = r.nonfinite.sum().float()
    return {prefix + k: v for k, v in out.items()}


def _perplexities(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, r: MismatchRatios) -> dict[str, torch.Tensor]:
    """Per-sequence perplexities of each policy, averaged over sequences with a valid token."""
    dtype = r.diff.dtype
    zero = torch.zeros((), dtype=dtype, device=r.diff.device)
    count = r.valid.sum(-1).to(dtype)
    rows = count > 0
    n_rows = rows.sum().to(dtype) + MASK_EPS

    def ppl(lp: torch.Tensor) -> torch.Tensor:
        lp = torch.where(r.valid, lp.to(dtype), zero).clamp(-1e30, 1e30)  # float32 sums stay finite
        nll = (-lp.sum(-1) / (count + MASK_EPS)).clamp(-PPL_LOG_CLAMP, PPL_LOG_CLAMP)
        return torch.where(rows, nll.exp(), zero).sum() / n_rows

    ratio = torch.where(rows, (-r.geo_log).exp(), zero).sum() / n_rows
    has = rows.any()
    one = torch.ones((), dtype=dtype, device=r.diff.device)
    return {"ppl_rollout": torch.where(has, ppl(rollout_logprobs), one),
            "ppl_train": torch.where(has, ppl(logprobs), one),
            "ppl_ratio": torch.where(has, ratio, one)}
