"""Gradient accumulation is exact: split a batch into micro-batches, pass the whole batch's
``global_tokens`` / ``global_seqs``, sum the micro-batch losses, and the loss and the gradient are
the whole-batch ones (float64, 1e-10), for every aggregation mode and every loss."""

import pytest
import torch

from steadyrl.functional import (
    LOSS_AGG_MODES,
    POLICY_LOSS_SELECTIONS,
    POLICY_LOSSES,
    aggregate_loss,
    clip_cov_candidates,
    count_tokens_and_seqs,
    kl_cov_select,
    random_subset,
    token_covariance,
    value_loss,
)

B, T = 9, 6
SPLITS = [[4, 5], [1, 3, 5], [1] * 9, [2, 2, 2, 3]]


def batch(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[2], lengths[5] = 0, T  # an empty row inside a micro-batch
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    lp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    old = lp + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.4
    adv = torch.randn(B, T, generator=g, dtype=torch.float64)
    weights = torch.rand(B, generator=g, dtype=torch.float64) + 0.5
    return lp, old, adv, mask, weights


def chunks(split):
    start = 0
    for size in split:
        yield slice(start, start + size)
        start += size


def assert_split_invariant(fn, leaf, mask, split, **agg):
    """``fn(rows, **agg) -> scalar``; whole batch vs sum over micro-batches, value and gradient."""
    tokens, seqs = count_tokens_and_seqs(mask)
    whole_leaf = leaf.clone().requires_grad_(True)
    whole = fn(whole_leaf, slice(None), **agg)
    whole.backward()
    # the whole batch with its own counts passed explicitly is the same thing as the default counts
    explicit_leaf = leaf.clone().requires_grad_(True)
    explicit = fn(explicit_leaf, slice(None), global_tokens=tokens, global_seqs=seqs, **agg)
    explicit.backward()
    assert explicit.item() == pytest.approx(whole.item(), rel=1e-12, abs=1e-14)

    split_leaf = leaf.clone().requires_grad_(True)
    total = torch.zeros((), dtype=torch.float64)
    for rows in chunks(split):
        part = fn(split_leaf, rows, global_tokens=tokens, global_seqs=seqs, **agg)
        part.backward()
        total = total + part.detach()
    assert total.item() == pytest.approx(whole.item(), rel=1e-10, abs=1e-12)
    torch.testing.assert_close(split_leaf.grad, whole_leaf.grad, rtol=1e-10, atol=1e-12)
    assert whole_leaf.grad.abs().sum() > 0  # the check is not vacuous


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("weighted", [False, True])
def test_aggregate_loss_is_split_invariant(mode, split, weighted):
    lp, _, adv, mask, weights = batch(LOSS_AGG_MODES.index(mode))
    per_token = lp * 2 + 1
    token_weights = (adv > 0).double()  # a token selection: half the tokens carry no gradient

    def fn(x, rows, **agg):
        sw = weights[rows] if weighted else None
        tw = token_weights[rows] if weighted else None
        return aggregate_loss(x[rows] ** 2, mask[rows], mode, sample_weights=sw, token_weights=tw, **agg)

    assert_split_invariant(fn, per_token, mask, split)


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("split", SPLITS[:2])
def test_policy_losses_are_split_invariant(name, mode, split):
    lp, old, adv, mask, weights = batch(7)
    dual = 1.4 if name == "ppo" else None
    clip = {"clip_low": 0.05, "clip_high": 0.08} if name == "gspo" else {}
    extra = _whole_batch_selection(name, old, adv, mask)

    def fn(x, rows, **agg):
        chosen = {k: v[rows] for k, v in extra.items()}
        loss, _ = POLICY_LOSSES[name](x[rows], old[rows], adv[rows], mask[rows], dual_clip=dual,
                                      loss_agg_mode=mode, sample_weights=weights[rows], norm_length=T, **clip,
                                      **chosen, **agg)
        return loss

    assert_split_invariant(fn, lp, mask, split)


def _whole_batch_selection(name, old, adv, mask):
    """A selecting loss is split-invariant when its selection is made over the whole batch (as the
    trainer does, from the step's old log-probs) and each micro-batch gets its rows of it."""
    kind = POLICY_LOSS_SELECTIONS.get(name)
    if kind is None:
        return {}
    cov = token_covariance(adv, old, mask)
    if kind == "kl_cov":
        return {"selected": kl_cov_select(cov, mask, 0.2)}
    keys = torch.rand(mask.shape, generator=torch.Generator().manual_seed(3))
    return {"selected": random_subset(clip_cov_candidates(cov, mask, -1.0, 1.0), 5, keys)}


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("clip", [None, 0.2])
def test_value_loss_is_split_invariant(mode, clip):
    lp, old, adv, mask, _ = batch(11)
    values, old_values, returns = old, lp, old + adv

    def fn(x, rows, **agg):
        loss, _ = value_loss(x[rows], old_values[rows], returns[rows], mask[rows], clip_range=clip,
                             loss_agg_mode=mode, **agg)
        return loss

    assert_split_invariant(fn, values, mask, SPLITS[1])


def test_without_global_counts_the_split_changes_the_loss():
    """The reason the global counts exist: per-micro-batch denominators weight tokens unequally."""
    lp, _, _, mask, _ = batch(3)
    whole = aggregate_loss(lp, mask, "token-mean")
    parts = sum(aggregate_loss(lp[r], mask[r], "token-mean") for r in chunks([4, 5])) / 2
    assert abs(parts.item() - whole.item()) > 1e-6
