"""Float64 oracles of peers' formulas that are not installable here, written from verl's code and the
papers' equations. This file imports nothing from steadyrl (tests/functional/test_oracles_are_independent
checks it): a bug shared with ``steadyrl.functional`` cannot hide in a helper both sides use.

* :func:`verl_kl_cov_loss`: verl's ``compute_policy_loss_kl_cov`` (Cui et al., arXiv 2505.22617)::

      cov_t = (A_t - mean A) (logp_t - mean logp)         over the valid tokens
      k = max(1, floor(ratio * N));  S = the k tokens of largest cov (torch.topk)
      loss_t = -A_t r_t + coef |log r_t| [t in S],  r_t = exp(logp_t - old_t)
      loss = sum_t loss_t / N                             (token-mean)

* :func:`verl_clip_cov_loss`: verl's ``compute_policy_loss_clip_cov``: PPO's clipped surrogate with
  the gradient of ``min(k, #candidates)`` tokens dropped, drawn uniformly among the valid tokens that
  PPO does not clip and whose covariance lies in ``(lb, ub)``.
"""

from __future__ import annotations

import torch


def _mean(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return x[keep].sum() / keep.sum()


def verl_kl_cov_loss(logp, old, adv, mask, ratio: float = 2e-4, coef: float = 1.0):
    """``(loss, selected [B, T] bool)`` in float64, as verl computes them (token-mean)."""
    logp, old, adv = logp.double(), old.double().detach(), adv.double().detach()
    keep = mask.bool()
    log_ratio = logp - old
    r = torch.exp(log_ratio)
    per_token = -adv * r
    selected = torch.zeros_like(keep)
    valid_idx = torch.nonzero(keep.reshape(-1), as_tuple=True)[0]
    a, lp = adv[keep], logp.detach()[keep]
    if a.numel():
        cov = (a - a.mean()) * (lp - lp.mean())
        k = max(1, int(a.numel() * ratio))
        top = valid_idx[torch.topk(cov, k, largest=True).indices]
        selected.view(-1)[top] = True
    per_token = per_token + torch.where(selected, coef * log_ratio.abs(), torch.zeros_like(per_token))
    loss = (per_token * keep).sum() / keep.sum().clamp(min=1)
    return loss, selected


def verl_clip_cov_candidates(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, lb=1.0, ub=5.0):
    """``[B, T]`` bool: the tokens verl's Clip-Cov may draw (valid, not clipped by PPO, ``lb < cov < ub``)."""
    logp, old, adv = logp.double().detach(), old.double(), adv.double()
    keep = mask.bool()
    r = torch.exp(logp - old)
    clipped = (-adv * r.clamp(1 - clip_low, 1 + clip_high) > -adv * r) & keep
    cov = (adv - _mean(adv, keep)) * (logp - _mean(logp, keep))
    return keep & ~clipped & (cov > lb) & (cov < ub)


def verl_clip_cov_loss(logp, old, adv, mask, dropped, clip_low=0.2, clip_high=0.2):
    """PPO's clipped surrogate ``max(-A r, -A clip(r))`` with the ``dropped`` tokens' terms zeroed
    (verl's ``corr``), token-mean over the valid tokens, float64."""
    logp, old, adv = logp.double(), old.double().detach(), adv.double().detach()
    keep = mask.bool()
    r = torch.exp(logp - old)
    per_token = torch.maximum(-adv * r, -adv * r.clamp(1 - clip_low, 1 + clip_high))
    per_token = per_token * (~dropped.bool()).double()
    return (per_token * keep).sum() / keep.sum().clamp(min=1)


def verl_clip_cov_draw(candidates: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """verl's draw: a random permutation of the candidates (row-major), the first ``count`` of it."""
    idx = torch.nonzero(candidates)
    out = torch.zeros_like(candidates, dtype=torch.bool)
    if len(idx):
        pick = idx[torch.randperm(len(idx), generator=generator)[: min(count, len(idx))]]
        out[pick[:, 0], pick[:, 1]] = True
    return out
