"""Policy losses (in a registry by name) and the value loss.

Every policy loss has one signature::

    fn(logprobs, old_logprobs, advantages, response_mask, *, clip_low, clip_high, dual_clip,
       loss_agg_mode, **aggregation) -> (loss, metrics)

``logprobs`` carry the gradient; ``old_logprobs`` and ``advantages`` are constants. Padding entries of
every input are replaced by 0 before any arithmetic, so NaN or inf there (a pad label whose logit is
masked to -inf has log-prob -inf) reaches neither the loss nor the gradient. Everything is computed
in float32 (float64 for float64 ``logprobs``/``values``). The per-token
loss is reduced by :func:`~steadyrl.functional.aggregation.aggregate_loss` (``aggregation`` takes
``global_tokens``, ``global_seqs``, ``norm_length``, ``sample_weights``). ``metrics`` are detached
float32 scalars over valid tokens only: ratio statistics, clip fractions, ``approx_kl`` (k3 of
the new policy against the old).

The importance ratio is ``r = exp(clamp(logprobs - old_logprobs, -20, 20))``: finite always.
"""

from __future__ import annotations

from typing import Callable

import torch

from .aggregation import aggregate_loss
from .constants import (
    CLIP_COV_LB,
    CLIP_COV_RATIO,
    CLIP_COV_UB,
    KL_COV_COEF,
    KL_COV_RATIO,
    LOG_RATIO_CLAMP,
    PG_CLIP,
    SAPO_TAU_NEG,
    SAPO_TAU_POS,
)
from .kl import kl_penalty
from .selection import clip_cov_candidates, kl_cov_select, random_subset, token_covariance, top_count
from .stats import acc_dtype, masked_mean

__all__ = [
    "POLICY_LOSSES",
    "POLICY_LOSS_METRIC_REDUCTIONS",
    "POLICY_LOSS_OPTIONS",
    "POLICY_LOSS_SELECTIONS",
    "register_policy_loss",
    "ppo_policy_loss",
    "gspo_policy_loss",
    "cispo_policy_loss",
    "vanilla_pg_loss",
    "sapo_policy_loss",
    "kl_cov_policy_loss",
    "clip_cov_policy_loss",
    "value_loss",
]

POLICY_LOSSES: dict[str, Callable] = {}
POLICY_LOSS_OPTIONS: dict[str, tuple[str, ...]] = {}
"""The ``algorithm.*`` keys each loss takes as keyword arguments of the same name (declared at its
registration): the trainer passes exactly these, so a new loss with a new option is one function
and one config key."""
POLICY_LOSS_SELECTIONS: dict[str, str] = {}
"""The losses that select tokens over the whole batch (``"kl_cov"`` / ``"clip_cov"``): the trainer
computes the selection once per mini-batch over every rank's tokens and passes it as ``selected``."""


def register_policy_loss(name: str, options: tuple[str, ...] = (), selection: str | None = None):
    """Decorator: register a policy loss under ``name``, with the ``algorithm.*`` ``options`` it
    takes and the batch-wide token ``selection`` it uses (if any)."""

    def wrap(fn):
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        POLICY_LOSSES[name] = fn
        POLICY_LOSS_OPTIONS[name] = tuple(options)
        if selection is not None:
            POLICY_LOSS_SELECTIONS[name] = selection
        return fn

    return wrap


def _valid(response_mask: torch.Tensor, x: torch.Tensor, *others: torch.Tensor):
    """The mask as bool, then ``x`` (keeps its gradient) and ``others`` (detached) in ``x``'s
    accumulation dtype with padding set to 0 by ``torch.where`` (whose gradient on padding is 0)."""
    keep = response_mask != 0
    dtype = acc_dtype(x)
    zero = torch.zeros((), dtype=dtype, device=x.device)
    out = [torch.where(keep, x.to(dtype), zero)]
    out += [torch.where(keep, o.detach().to(dtype), zero) for o in others]
    return (keep, *out)


def _log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    return (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def _f32(metrics: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to(torch.float32) for k, v in metrics.items()}


def _masked_extreme(x: torch.Tensor, keep: torch.Tensor, largest: bool) -> torch.Tensor:
    if not keep.any():
        return torch.zeros((), dtype=torch.float32, device=x.device)
    fill = float("-inf") if largest else float("inf")
    filled = torch.where(keep, x, torch.full((), fill, dtype=x.dtype, device=x.device))
    return filled.max() if largest else filled.min()


POLICY_LOSS_METRIC_REDUCTIONS: dict[str, str] = {"ratio_max": "max", "ratio_min": "min"}
"""How the trainer reduces a policy loss's metric over micro-batches, mini-batches and ranks, for
the metrics that are not a token-weighted mean (every other one): declared here, where they are made."""


def _ratio_metrics(ratio, logprobs, old_logprobs, keep) -> dict[str, torch.Tensor]:
    """The ratio's mean, its extremes (``ratio_max`` / ``ratio_min``: reduced by max / min, see
    :data:`POLICY_LOSS_METRIC_REDUCTIONS`) and the k3 estimate of KL(old || new)."""
    ratio = ratio.detach()
    return {
        "ratio_mean": masked_mean(ratio, keep),
        "ratio_max": _masked_extreme(ratio, keep, largest=True),
        "ratio_min": _masked_extreme(ratio, keep, largest=False),
        "approx_kl": masked_mean(kl_penalty(logprobs.detach(), old_logprobs.detach(), "k3"), keep),
    }


def _check_clip(clip_low: float, clip_high: float, dual_clip: float | None) -> None:
    if not (0 <= clip_low and 0 <= clip_high):
        raise ValueError(f"clip ranges must be >= 0, got clip_low={clip_low}, clip_high={clip_high}")
    if dual_clip is not None and not dual_clip > 1:
        raise ValueError(f"dual_clip must be > 1 (seed 003 uses 1 + 2 * clip), got {dual_clip}")


def _clipped_surrogate(ratio, advantages, keep, clip_low, clip_high, dual_clip):
    """Per-token PPO loss ``max(-A r, -A clip(r))``, with the dual clip bound ``-c A`` for A < 0."""
    adv = advantages.detach()
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    r = ratio.detach()
    metrics = {
        "clipfrac_low": masked_mean(((r < 1.0 - clip_low) & (adv < 0)).float(), keep),
        "clipfrac_high": masked_mean(((r > 1.0 + clip_high) & (adv > 0)).float(), keep),
    }
    metrics["clipfrac"] = metrics["clipfrac_low"] + metrics["clipfrac_high"]
    if dual_clip is not None:
        bound = -adv * dual_clip
        dual_active = (adv < 0) & (loss > bound)
        loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)
        metrics["clipfrac_dual"] = masked_mean(dual_active.float(), keep)
    else:
        metrics["clipfrac_dual"] = torch.zeros((), device=ratio.device)
    return loss, metrics


@register_policy_loss("ppo")
def ppo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = PG_CLIP,
    clip_high: float = PG_CLIP,
    dual_clip: float | None = None,
    loss_agg_mode: str = "token-mean",
    **aggregation,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate (seed 003) with an asymmetric range and an optional dual clip.

    ``L = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))``; with ``dual_clip = c`` and
    ``A < 0``, ``L = min(L, -c A)`` so a huge ratio on a bad token cannot blow the loss up
    (the trainer's default ``c`` is ``1 + 2 * clip``). ``clipfrac_low`` / ``clipfrac_high`` count
    valid tokens where the lower / upper clip is active, ``clipfrac_dual`` where the dual bound is.
    """
    _check_clip(clip_low, clip_high, dual_clip)
    keep, logprobs, old_logprobs, advantages = _valid(response_mask, logprobs, old_logprobs, advantages)
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    per_token, metrics = _clipped_surrogate(ratio, advantages, keep, clip_low, clip_high, dual_clip)
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode, **aggregation)
    return loss, _f32({**metrics, **_ratio_metrics(ratio, logprobs, old_logprobs, keep)})


@register_policy_loss("gspo")
def gspo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    dual_clip: float | None = None,
    loss_agg_mode: str = "seq-mean-token-mean",
    **aggregation,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO: a sequence-level ratio ``s_i = exp(mean_t (logp - old_logp))`` (length-normalised),
    applied per token as ``s_i,t = sg[s_i] * exp(logp_t - sg[logp_t])`` (same value as ``s_i``,
    gradient of the token), then the PPO clipped surrogate. Its clip ranges are tiny (the paper
    uses 3e-4 / 4e-4) because a sequence ratio moves far less than a token ratio.
    """
    _check_clip(clip_low, clip_high, dual_clip)
    keep, logprobs, old_logprobs, advantages = _valid(response_mask, logprobs, old_logprobs, advantages)
    seq_log_ratio = masked_mean(_log_ratio(logprobs, old_logprobs), keep, dim=-1)
    lp = logprobs
    token_log_ratio = seq_log_ratio.detach().unsqueeze(-1) + lp - lp.detach()
    ratio = torch.exp(token_log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    per_token, metrics = _clipped_surrogate(ratio, advantages, keep, clip_low, clip_high, dual_clip)
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode, **aggregation)
    return loss, _f32({**metrics, **_ratio_metrics(ratio, logprobs, old_logprobs, keep)})


@register_policy_loss("cispo")
def cispo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
    dual_clip: float | None = None,
    loss_agg_mode: str = "token-mean",
    **aggregation,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1): ``L = -sg[clip(r, 1 - clip_low, 1 + clip_high)] * A * logp``.

    The importance weight is clipped and detached, so every token keeps a gradient (none is
    dropped by clipping, unlike PPO). ``clip_low = 1`` (the default) means no lower bound.
    ``dual_clip`` is ignored.
    """
    _check_clip(clip_low, clip_high, None)
    keep, logprobs, old_logprobs, advantages = _valid(response_mask, logprobs, old_logprobs, advantages)
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    weight = ratio.detach().clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = -weight * advantages * logprobs
    r = ratio.detach()
    metrics = {
        "clipfrac_low": masked_mean((r < 1.0 - clip_low).float(), keep),
        "clipfrac_high": masked_mean((r > 1.0 + clip_high).float(), keep),
        "clipfrac_dual": torch.zeros((), device=ratio.device),
    }
    metrics["clipfrac"] = metrics["clipfrac_low"] + metrics["clipfrac_high"]
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode, **aggregation)
    return loss, _f32({**metrics, **_ratio_metrics(ratio, logprobs, old_logprobs, keep)})


@register_policy_loss("vanilla_pg")
def vanilla_pg_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = PG_CLIP,
    clip_high: float = PG_CLIP,
    dual_clip: float | None = None,
    loss_agg_mode: str = "token-mean",
    **aggregation,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Unclipped importance-weighted policy gradient ``L = -A * r``; on-policy (``r = 1``) its
    gradient is REINFORCE's ``-A * grad logp``. The clip arguments are ignored."""
    keep, logprobs, old_logprobs, advantages = _valid(response_mask, logprobs, old_logprobs, advantages)
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    per_token = -advantages * ratio
    zero = torch.zeros((), device=ratio.device)
    metrics = {"clipfrac": zero, "clipfrac_low": zero, "clipfrac_high": zero, "clipfrac_dual": zero}
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode, **aggregation)
    return loss, _f32({**metrics, **_ratio_metrics(ratio, logprobs, old_logprobs, keep)})


@register_policy_loss("sapo", options=("sapo_tau_pos", "sapo_tau_neg"))
def sapo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = PG_CLIP,
    clip_high: float = PG_CLIP,
    dual_clip: float | None = None,
    loss_agg_mode: str = "token-mean",
    sapo_tau_pos: float = SAPO_TAU_POS,
    sapo_tau_neg: float = SAPO_TAU_NEG,
    **aggregation,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAPO (Gao et al., "Soft Adaptive Policy Optimization", arXiv 2511.20347): a soft gate in
    place of the hard clip, ``L = -f(r) * A`` with ``f(r) = (4 / tau) * sigmoid(tau * (r - 1))``,
    ``tau = sapo_tau_pos`` where ``A > 0`` and ``sapo_tau_neg`` where ``A < 0``.

    ``f'(r) = 4 sigma (1 - sigma)``: 1 on-policy (the gradient of ``-r A`` there), fading smoothly as
    ``r`` leaves 1, so an off-policy token is damped instead of cut at a fixed band. ``gate_mean``
    reports the mean of that gradient weight over valid tokens (1 = on-policy). The clip arguments
    are ignored; clip fractions are 0.
    """
    for name, tau in (("sapo_tau_pos", sapo_tau_pos), ("sapo_tau_neg", sapo_tau_neg)):
        if not tau > 0:
            raise ValueError(f"{name} must be > 0, got {tau}")
    keep, logprobs, old_logprobs, advantages = _valid(response_mask, logprobs, old_logprobs, advantages)
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    tau = torch.where(advantages > 0, torch.full_like(advantages, sapo_tau_pos),
                      torch.full_like(advantages, sapo_tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0))
    per_token = -(4.0 / tau) * gate * advantages
    g = gate.detach()
    zero = torch.zeros((), device=ratio.device)
    metrics = {"clipfrac": zero, "clipfrac_low": zero, "clipfrac_high": zero, "clipfrac_dual": zero,
               "gate_mean": masked_mean(4.0 * g * (1.0 - g), keep)}
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode, **aggregation)
    return loss, _f32({**metrics, **_ratio_metrics(ratio, logprobs, old_logprobs, keep)})


def _with_token_weights(aggregation: dict, weights: torch.Tensor) -> dict:
    """``aggregation`` with ``token_weights`` multiplied by ``weights`` (selections compose)."""
    given = aggregation.get("token_weights")
    return {**aggregation, "token_weights": weights if given is None else weights * given.to(weights.dtype)}


@register_policy_loss("kl_cov", options=("kl_cov_ratio", "kl_cov_coef"), selection="kl_cov")
def kl_cov_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = PG_CLIP,
    clip_high: float = PG_CLIP,
    dual_clip: float | None = None,
    loss_agg_mode: str = "token-mean",
    kl_cov_ratio: float = KL_COV_RATIO,
    kl_cov_coef: float = KL_COV_COEF,
    selected: torch.Tensor | None = None,
    **aggregation,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL-Cov (Cui et al., arXiv 2505.22617): the unclipped surrogate ``-A r`` on every token, plus
    ``kl_cov_coef * |log r|`` on the selected tokens: the ``max(1, floor(kl_cov_ratio * N))`` of
    largest covariance ``(A - mean A)(logp - mean logp)``
    (:func:`~steadyrl.functional.selection.kl_cov_select`). ``selected [B, T]`` is the trainer's
    selection over the whole batch; without it the selection is this batch's (as verl computes it).
    ``cov_selected_frac`` reports the selected share of valid tokens. Clip arguments are ignored.
    """
    if not kl_cov_coef >= 0:
        raise ValueError(f"kl_cov_coef must be >= 0, got {kl_cov_coef}")
    keep, logprobs, old_logprobs, advantages = _valid(response_mask, logprobs, old_logprobs, advantages)
    if selected is None:
        selected = kl_cov_select(token_covariance(advantages, logprobs, keep), keep, kl_cov_ratio)
    selected = selected.bool() & keep
    log_ratio = _log_ratio(logprobs, old_logprobs)
    ratio = torch.exp(log_ratio)
    zero = torch.zeros((), dtype=ratio.dtype, device=ratio.device)
    per_token = -advantages * ratio + torch.where(selected, kl_cov_coef * log_ratio.abs(), zero)
    z = torch.zeros((), device=ratio.device)
    metrics = {"clipfrac": z, "clipfrac_low": z, "clipfrac_high": z, "clipfrac_dual": z,
               "cov_selected_frac": masked_mean(selected.float(), keep)}
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode, **aggregation)
    return loss, _f32({**metrics, **_ratio_metrics(ratio, logprobs, old_logprobs, keep)})


@register_policy_loss("clip_cov", options=("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"), selection="clip_cov")
def clip_cov_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = PG_CLIP,
    clip_high: float = PG_CLIP,
    dual_clip: float | None = None,
    loss_agg_mode: str = "token-mean",
    clip_cov_ratio: float = CLIP_COV_RATIO,
    clip_cov_lb: float = CLIP_COV_LB,
    clip_cov_ub: float = CLIP_COV_UB,
    selected: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    **aggregation,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clip-Cov (Cui et al., arXiv 2505.22617): the PPO clipped surrogate, with the gradient of a few
    tokens dropped: ``max(1, floor(clip_cov_ratio * N))`` drawn at random among the tokens whose
    covariance lies in ``(clip_cov_lb, clip_cov_ub)`` and that PPO's clip has not already cut.
    ``selected [B, T]`` is the trainer's draw over the whole batch (tokens PPO clips now are then
    taken out of it); without it the draw is this batch's, from ``generator``. A dropped token keeps
    its place in the denominators. ``cov_selected_frac`` reports the dropped share of valid tokens.
    """
    _check_clip(clip_low, clip_high, dual_clip)
    keep, logprobs, old_logprobs, advantages = _valid(response_mask, logprobs, old_logprobs, advantages)
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    per_token, metrics = _clipped_surrogate(ratio, advantages, keep, clip_low, clip_high, dual_clip)
    adv, r = advantages.detach(), ratio.detach()
    clipped_now = -adv * r.clamp(1.0 - clip_low, 1.0 + clip_high) > -adv * r
    free = keep & ~clipped_now
    if selected is None:
        candidates = clip_cov_candidates(token_covariance(adv, logprobs, keep), free, clip_cov_lb, clip_cov_ub)
        keys = torch.rand(keep.shape, generator=generator, device=keep.device)
        selected = random_subset(candidates, top_count(int(keep.sum()), clip_cov_ratio), keys)
    selected = selected.bool() & free
    metrics["cov_selected_frac"] = masked_mean(selected.float(), keep)
    weights = (~selected).to(per_token.dtype)
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode, **_with_token_weights(aggregation, weights))
    return loss, _f32({**metrics, **_ratio_metrics(ratio, logprobs, old_logprobs, keep)})


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    clip_range: float | None = None,
    loss_agg_mode: str = "token-mean",
    **aggregation,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Critic loss ``0.5 * (V - R)^2``; with ``clip_range = c`` the PPO value clip
    ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)``.

    Metrics: ``vf_clipfrac`` (valid tokens where the clipped term is larger), ``vpred_mean``.
    """
    keep, v, ret, old = _valid(response_mask, values, returns, old_values)
    loss = (v - ret).square()
    vf_clipfrac = torch.zeros((), device=v.device)
    if clip_range is not None:
        if not clip_range > 0:
            raise ValueError(f"value clip_range must be > 0 or None, got {clip_range}")
        clipped = old + (v - old).clamp(-clip_range, clip_range)
        clipped_loss = (clipped - ret).square()
        vf_clipfrac = masked_mean((clipped_loss > loss).float().detach(), keep)
        loss = torch.maximum(loss, clipped_loss)
    agg = aggregate_loss(0.5 * loss, response_mask, loss_agg_mode, **aggregation)
    return agg, _f32({"vf_clipfrac": vf_clipfrac, "vpred_mean": masked_mean(v.detach(), keep)})
