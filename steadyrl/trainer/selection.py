"""Which tokens of a mini-batch carry the policy gradient, decided once over the whole mini-batch.

Two switches of ``algorithm`` select tokens (:mod:`steadyrl.functional.selection` has the formulas):

* ``top_entropy_quantile < 1``: the tokens whose entropy under the step's policy (the old log-prob
  pass) is in the top fraction carry the policy gradient (``token_weights`` 1, the rest 0; every
  token still counts in the loss's denominators, as in TRL and the paper);
* ``policy_loss: kl_cov / clip_cov``: the covariance selection (``selected``), from the advantages and
  the step's old log-probs, with the means taken over the mini-batch.

The quantile, the means, the top-k and the random draw's threshold are taken over the mini-batch's
valid tokens on every data-parallel rank (each rank sends only its candidates for the threshold), so
the selection does not depend on how the mini-batch is cut into micro-batches, and for the entropy
and KL-Cov selections not on the ranks either (except which of several tokens tied at KL-Cov's
``k``-th covariance are taken: exactly ``k`` always, the first ones in rank then row order).
Clip-Cov's draw uses each rank's own random keys: the same in distribution for any layout, not
token for token.

The old log-probs stand in for the current ones of the papers' formulas: in the default on-policy
step (one epoch, one mini-batch) they are equal; over several mini-batches the selection stays
the one made from the policy the step sampled with.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .. import distributed as dist
from ..config.schema import AlgorithmConfig
from ..functional import (
    POLICY_LOSS_SELECTIONS,
    clip_cov_candidates,
    high_entropy_mask,
    kl_cov_select,
    masked_quantile,
    random_subset,
    token_covariance,
    top_count,
)
from .batch import TrainBatch


def needs_selection_inputs(algo: AlgorithmConfig) -> bool:
    """Does the update need the old log-prob pass (and its entropies) before the first mini-batch?"""
    return algo.top_entropy_quantile < 1.0 or algo.policy_loss in POLICY_LOSS_SELECTIONS


def needs_old_entropy(algo: AlgorithmConfig) -> bool:
    return algo.top_entropy_quantile < 1.0


def _valid_values(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return x.detach().double()[mask & torch.isfinite(x)].cpu()


def _global_quantile(x: torch.Tensor, mask: torch.Tensor, q: float) -> float:
    values = torch.cat(dist.gather_objects(_valid_values(x, mask)))
    return float(masked_quantile(values, torch.ones_like(values, dtype=torch.bool), q))


def _global_kth(x: torch.Tensor, mask: torch.Tensor, k: int, largest: bool) -> tuple[float, int]:
    """``(threshold, ties)`` for :func:`~steadyrl.functional.selection.exact_top`: the ``k``-th
    largest (smallest) valid value over all ranks (each rank sends its own top ``k``), and how many
    of this rank's values equal to it to take so that exactly ``k`` are taken over all ranks (the
    ties go to the ranks in rank order, within a rank in row-major order)."""
    values = _valid_values(x, mask)
    mine = torch.topk(values, min(k, values.numel()), largest=largest).values
    pooled = torch.cat(dist.gather_objects(mine))
    if k <= 0 or pooled.numel() == 0:
        return (float("inf") if largest else float("-inf")), 0
    threshold = float(torch.topk(pooled, min(k, pooled.numel()), largest=largest).values[-1])
    beyond = int(dist.all_reduce_sum(((values > threshold) if largest else (values < threshold)).sum()))
    tied = dist.gather_objects(int((values == threshold).sum()))
    before = sum(tied[: dist.rank()])
    return threshold, min(max(k - beyond - before, 0), tied[dist.rank()])


def _covariance(mini: TrainBatch, mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The centred covariance of advantage and old log-prob with the global batch's means, and the
    number of valid tokens over all ranks."""
    adv, lp = mini.advantages.double(), mini.old_logprobs.double()
    ok = mask & torch.isfinite(adv) & torch.isfinite(lp)
    n = dist.all_reduce_sum(ok.sum())
    adv_mean = dist.all_reduce_sum(adv[ok].sum()) / max(n, 1.0)
    lp_mean = dist.all_reduce_sum(lp[ok].sum()) / max(n, 1.0)
    return token_covariance(adv, lp, mask, adv_mean, lp_mean), int(n)


def select_tokens(mini: TrainBatch, algo: AlgorithmConfig, generator: torch.Generator | None = None) -> TrainBatch:
    """``mini`` with ``token_weights`` (entropy selection) and ``selected`` (covariance selection)
    filled in where the config asks for them (a collective with several ranks: every rank calls it)."""
    mask = mini.loss_mask.bool()
    weights = selected = None
    if needs_old_entropy(algo):
        if mini.old_entropy is None:
            raise ValueError("algorithm.top_entropy_quantile < 1 needs the old log-prob pass's entropies")
        q = algo.top_entropy_quantile
        threshold = _global_quantile(mini.old_entropy, mask, 1.0 - q)
        weights = high_entropy_mask(mini.old_entropy, mask, q, threshold).float()
    kind = POLICY_LOSS_SELECTIONS.get(algo.policy_loss)
    if kind is not None:
        if mini.old_logprobs is None:
            raise ValueError(f"algorithm.policy_loss = {algo.policy_loss} needs the old log-prob pass")
        cov, n = _covariance(mini, mask)
        if kind == "kl_cov":
            k = top_count(n, algo.kl_cov_ratio)
            selected = kl_cov_select(cov, mask, algo.kl_cov_ratio, *_global_kth(cov, mask, k, largest=True))
        else:
            candidates = clip_cov_candidates(cov, mask, algo.clip_cov_lb, algo.clip_cov_ub)
            keys = torch.rand(mask.shape, generator=generator, dtype=torch.float64)
            k = top_count(n, algo.clip_cov_ratio)
            selected = random_subset(candidates, k, keys, *_global_kth(keys, candidates, k, largest=False))
    return replace(mini, token_weights=weights, selected=selected)


def selection_metrics(mini: TrainBatch) -> dict[str, float]:
    """The share of valid tokens the entropy selection kept (the covariance share is the loss's)."""
    if mini.token_weights is None:
        return {}
    mask = mini.loss_mask.bool()
    return {"actor/entropy_selected_frac": float(mini.token_weights[mask].sum() / mask.sum().clamp(min=1))}
