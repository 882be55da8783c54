"""The training-inference mismatch in a step: corrected (``rollout.correction`` / ``rollout.tis_cap``),
measured (``mismatch/...``) and shown (each sample's worst-disagreeing tokens in ``samples.jsonl``).

Runs where the engine returns its own log-probs (vLLM, asynchronous rollouts, or the HF engine
with ``rollout.dtype``) compare them, ``pi_rollout``, with the trainer's recomputed
``old_logprobs``, ``pi_train``, over the policy's tokens only (observations of an episode never
count). Three cases, decided by the config:

* ``rollout.correction.mode`` set: :func:`steadyrl.functional.correct_mismatch` at its level;
  the advantages are multiplied by the weights (for every loss: scaling a token's advantage by
  ``w > 0`` scales its loss term), the dropped tokens leave the loss mask (and its denominators,
  whatever the aggregation). A NaN or inf behaviour log-prob drops its token (its sequence at
  sequence level or with the geometric mask) and is counted.
* otherwise ``rollout.tis_cap`` (token truncation) or nothing, exactly as before this module
  existed (:mod:`steadyrl.functional.importance`: its ``rollout/...`` metrics, and ``-inf``
  weighted by the cap);
* ``rollout.correction.bypass``: ``old_logprobs`` are the engine's (:func:`bypass_old_logprobs`),
  there is no train log-prob to compare with; tokens whose behaviour log-prob is not finite leave
  the loss and are counted in ``rollout/nan_logprob_tokens``, and their ``old_logprobs`` are the
  reference's, so the KL in the reward charges them nothing.

The ``mismatch/`` fractions report what the step did: ``rollout.correction``'s drops and
truncations, ``rollout.tis_cap``'s (a NaN token dropped, a ``-inf`` one trained at the cap: truncated),
or none at all without a correction (non-finite tokens are then counted in
``mismatch/nonfinite_tokens`` and train at weight 1 on the trainer's log-probs).

The measurement (``mismatch/k1`` ... ``mismatch/masked_seq_frac``, see docs/metrics.md) is over all
the step's policy tokens, trained on or not: the gap is the engines', not the batch's selection.
With reward domains the same metrics are logged per domain, ``mismatch/domain/<domain>/...``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from ..functional.importance import (
    behaviour_logprob_mask,
    rollout_mismatch_metrics,
    truncated_importance_weights,
    truncation_correction,
)
from ..functional.mismatch import correct_mismatch, mismatch_metrics
from ..rewards.metrics import domain_name

if TYPE_CHECKING:
    from ..config.schema import RolloutConfig
    from .global_batch import GlobalSamples

WORST_TOKENS = 3
"""Tokens per sample in ``samples.jsonl``'s ``mismatch_tokens``: those with the largest |gap|."""


def bypass_old_logprobs(rollout_logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None = None) -> torch.Tensor:
    """``old_logprobs`` under ``rollout.correction.bypass``: the engine's, float32. A non-finite one
    is replaced by the reference's log-prob of the token (0 without a reference, or where that is not
    finite either): its token leaves the loss in :func:`importance_correction`, and with the KL in
    the reward it must not be charged either, which ``kl(ref, ref) = 0`` ensures for every estimator
    (a 0 in its place was charged ``kl(0, ref)``, a return of 0.71 where 0.96 was right)."""
    lp = rollout_logprobs.float()
    zero = torch.zeros((), dtype=lp.dtype, device=lp.device)
    if ref_logprobs is None:
        fill = zero
    else:
        ref = ref_logprobs.to(device=lp.device, dtype=lp.dtype)
        fill = torch.where(torch.isfinite(ref), ref, zero)
    return torch.where(torch.isfinite(lp), lp, fill)


def _applied(o: torch.Tensor, r: torch.Tensor, p: torch.Tensor, plan, legacy_cap: float | None):
    """What the step did to these rows' policy tokens, as a ``Correction`` (None: nothing), so the
    ``mismatch/`` fractions report it: ``rollout.correction``'s, ``rollout.tis_cap``'s truncation
    (a NaN token dropped, ``-inf`` at the cap), or no correction at all (every token trains)."""
    if legacy_cap is not None:
        return truncation_correction(o, r, p, legacy_cap)
    if plan is None:
        return None
    level, modes = plan
    return correct_mismatch(o, r, p, level=level, modes=modes)


def _measure(old: torch.Tensor, rollout: torch.Tensor, policy: torch.Tensor, plan, domains,
             legacy_cap: float | None = None) -> dict[str, float]:
    """``mismatch/...`` over ``policy`` tokens, and per domain when there are domains."""

    def over(rows, prefix: str) -> dict[str, float]:
        o, r, p = old[rows], rollout[rows], policy[rows]
        corr = _applied(o, r, p, plan, legacy_cap)
        return {k: float(v) for k, v in mismatch_metrics(o, r, p, corr, prefix=prefix).items()}

    metrics = over(slice(None), "mismatch/")
    if domains is not None:
        names = [domain_name(d) for d in domains]
        for name in sorted(set(names)):
            rows = torch.tensor([n == name for n in names], dtype=torch.bool)
            metrics.update(over(rows, f"mismatch/domain/{name}/"))
    return metrics


def importance_correction(ro: RolloutConfig, whole: GlobalSamples, advantages: torch.Tensor,
                          loss_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Correct and measure the mismatch when the engine returned its log-probs (module doc).
    Returns ``(advantages, loss_mask, metrics)``; without rollout log-probs, the inputs unchanged."""
    if whole.rollout_logprobs is None:
        return advantages, loss_mask, {}
    old, rollout = whole.old_logprobs, whole.rollout_logprobs
    if ro.correction.bypass:
        keep = (loss_mask != 0) & torch.isfinite(rollout)
        return advantages, keep.to(loss_mask.dtype), {
            "rollout/nan_logprob_tokens": float(((loss_mask != 0) & ~keep).sum())}
    plan = ro.correction.modes(ro.tis_cap)
    if ro.correction.mode is not None:
        level, modes = plan
        metrics = rollout_mismatch_metrics(old, rollout, loss_mask)  # the names logged before, before the drops
        corr = correct_mismatch(old, rollout, whole.policy_mask, level=level, modes=modes)
        advantages = advantages * corr.weights.to(advantages.dtype)
        loss_mask = (loss_mask * corr.keep).to(loss_mask.dtype)
    elif ro.tis_cap is None:
        metrics = rollout_mismatch_metrics(old, rollout, loss_mask)
    else:
        weights, metrics = truncated_importance_weights(old, rollout, loss_mask, ro.tis_cap)
        loss_mask = behaviour_logprob_mask(rollout, loss_mask).to(loss_mask.dtype)
        advantages = advantages * weights
    legacy_cap = ro.tis_cap if ro.correction.mode is None else None
    metrics.update(_measure(old, rollout, whole.policy_mask, plan, whole.result.domains, legacy_cap))
    return advantages, loss_mask, metrics


class WorstTokens(NamedTuple):
    """Per sample of this rank, its ``WORST_TOKENS`` policy tokens with the largest ``|logp_train -
    logp_rollout|`` (``[B, k]`` each; ``present`` False past a sample's own policy tokens)."""

    ids: torch.Tensor
    train: torch.Tensor
    rollout: torch.Tensor
    present: torch.Tensor


def worst_tokens(old: torch.Tensor | None, rollout: torch.Tensor | None, policy_mask: torch.Tensor,
                 response_ids: torch.Tensor, k: int = WORST_TOKENS) -> WorstTokens | None:
    """The worst-disagreeing tokens of each row (:class:`WorstTokens`), or None without both log-probs.
    A token with a non-finite log-prob is the worst of all (its gap is unknown)."""
    if old is None or rollout is None or response_ids.shape[1] == 0:
        return None
    valid = policy_mask.bool()
    gap = (old.float() - rollout.float()).abs().nan_to_num(nan=float("inf"))
    gap = torch.where(valid, gap, torch.full((), -1.0))
    k = min(k, gap.shape[1])
    top, index = gap.topk(k, dim=-1)
    return WorstTokens(response_ids.gather(1, index), old.float().gather(1, index),
                       rollout.float().gather(1, index), top >= 0)


def worst_token_rows(worst: WorstTokens, decode, rows: int) -> list[list[dict]]:
    """The first ``rows`` samples' worst tokens as JSON-ready dicts: the decoded token, both log-probs."""
    out = []
    for i in range(min(rows, worst.ids.shape[0])):
        out.append([{"token": decode([int(worst.ids[i, j])]), "logprob_train": _number(worst.train[i, j]),
                     "logprob_rollout": _number(worst.rollout[i, j])}
                    for j in range(worst.ids.shape[1]) if bool(worst.present[i, j])])
    return out


def _number(x: torch.Tensor) -> float | str:
    value = float(x)
    return value if value == value and abs(value) != float("inf") else str(value)
