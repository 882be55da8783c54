"""KL-Cov and Clip-Cov against verl's formulas (tests/support_oracles.py, float64, written from verl's
``compute_policy_loss_kl_cov`` / ``compute_policy_loss_clip_cov``; verl is not installable here).

steadyrl's token-mean divides by ``N + 1e-8`` (MASK_EPS, seed 000) where the oracle divides by ``N``:
values and gradients agree to a relative 1e-8 / N, hence ``REL`` below.

KL-Cov takes exactly ``k`` tokens, as verl's ``topk`` does, also when covariances tie: with equal
advantages every covariance is 0, and taking every tied token put the ``|log r|`` penalty on all of
them (a gradient made of rounding noise on a batch with no signal)."""

import ast
import threading
from pathlib import Path

import pytest
import support_oracles as oracle
import torch
from hypothesis import given
from hypothesis import strategies as st

from steadyrl import distributed
from steadyrl.config import load_config
from steadyrl.functional import (
    POLICY_LOSSES,
    clip_cov_candidates,
    exact_top,
    kl_cov_select,
    random_subset,
    token_covariance,
    top_count,
)
from steadyrl.trainer.selection import select_tokens

torch.set_num_threads(1)
REL = 2e-8  # MASK_EPS / N at most, and float64 rounding


def test_kl_cov_minimal_case_is_verls_value():
    """old = [-1, -2, -3, -4], log-probs = old + 0.1, advantages 0.5, defaults: one token of four
    gets |log r| = 0.1, so the loss is -0.5 e^0.1 + 0.1 / 4 (before: all four, -0.4525854579)."""
    old = torch.tensor([[-1.0, -2.0, -3.0, -4.0]], dtype=torch.float64)
    lp, adv, mask = old + 0.1, torch.full_like(old, 0.5), torch.ones_like(old)
    expected, chosen = oracle.verl_kl_cov_loss(lp, old, adv, mask)
    assert expected.item() == pytest.approx(-0.5275854590, abs=1e-10)
    assert int(chosen.sum()) == 1
    loss, metrics = POLICY_LOSSES["kl_cov"](lp, old, adv, mask)
    assert loss.item() == pytest.approx(-0.5275854590, rel=REL)
    assert metrics["cov_selected_frac"].item() == pytest.approx(0.25)


def test_zero_advantages_put_the_penalty_on_k_tokens_not_all():
    """The issue's whole update: 44 valid tokens, zero advantages: 1 token penalised, not 44."""
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(4, 11)
    old = -torch.rand(4, 11, generator=g, dtype=torch.float64) * 3
    lp = (old + 0.05 * torch.randn(4, 11, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = torch.zeros(4, 11, dtype=torch.float64)
    loss, metrics = POLICY_LOSSES["kl_cov"](lp, old, adv, mask)
    expected, _ = oracle.verl_kl_cov_loss(lp, old, adv, mask)
    assert metrics["cov_selected_frac"].item() * 44 == pytest.approx(1.0)
    loss.backward()
    assert int((lp.grad != 0).sum()) == 1  # one token's |log r| carries the whole gradient
    # verl's topk picks one of the tied tokens (which one torch leaves open): the gradient's norm is one token's
    assert float(lp.grad.norm()) == pytest.approx(1.0 / 44, rel=REL)
    assert abs(loss.item() - expected.item()) <= 0.15 / 44  # |log r| of one token vs another


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ratio", [2e-4, 0.05, 0.3, 1.0])
def test_kl_cov_value_gradient_and_selection_equal_verls_on_random_inputs(seed, ratio):
    g = torch.Generator().manual_seed(seed)
    rows, cols = 5, 9
    mask = (torch.arange(cols) < torch.randint(0, cols + 1, (rows, 1), generator=g)).float()
    mask[0, 0] = 1.0  # at least one valid token
    old = -torch.rand(rows, cols, generator=g, dtype=torch.float64) * 4
    lp = old + 0.3 * torch.randn(rows, cols, generator=g, dtype=torch.float64)
    adv = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    ours_lp, theirs_lp = lp.clone().requires_grad_(True), lp.clone().requires_grad_(True)
    loss, _ = POLICY_LOSSES["kl_cov"](ours_lp, old, adv, mask, kl_cov_ratio=ratio)
    expected, chosen = oracle.verl_kl_cov_loss(theirs_lp, old, adv, mask, ratio=ratio)
    loss.backward()
    expected.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=REL, abs=1e-14)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=REL, atol=1e-14)
    ours = kl_cov_select(token_covariance(adv, lp, mask), mask, ratio)
    assert torch.equal(ours, chosen)


@pytest.mark.parametrize("ties", [1, 3, 7, 20])
def test_kl_cov_takes_exactly_k_when_covariances_tie_at_the_kth(ties):
    """A block of equal covariances straddling the k-th place: the larger ones all, then the first
    tied ones in row-major order up to k."""
    cov = torch.zeros(4, 8, dtype=torch.float64)
    cov.view(-1)[:5] = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    cov.view(-1)[5 : 5 + ties] = 0.5
    mask = torch.ones(4, 8)
    for ratio in (0.1, 0.2, 0.25, 0.5, 1.0):
        k = top_count(32, ratio)
        chosen = kl_cov_select(cov, mask, ratio)
        assert int(chosen.sum()) == k, (ratio, ties)
        kth = torch.sort(cov.view(-1), descending=True).values[k - 1]
        assert bool((cov[chosen] >= kth).all()) and bool(chosen[cov > kth].all())


@given(seed=st.integers(0, 10_000), levels=st.integers(1, 4), ratio=st.floats(1e-4, 1.0),
       rows=st.integers(1, 5), cols=st.integers(1, 7), dtype=st.sampled_from([torch.float16, torch.float32,
                                                                               torch.float64]))
def test_kl_cov_selects_exactly_k_largest_whatever_the_ties(seed, levels, ratio, rows, cols, dtype):
    """Covariances drawn from a few levels (many ties), a random mask, non-finite entries: exactly
    ``min(k, finite valid)`` tokens, inside the mask, and none left out is larger than one taken."""
    g = torch.Generator().manual_seed(seed)
    cov = torch.randint(0, levels, (rows, cols), generator=g).to(dtype)
    cov[torch.rand(rows, cols, generator=g) < 0.1] = float("nan")
    mask = torch.rand(rows, cols, generator=g) < 0.7
    chosen = kl_cov_select(cov, mask, ratio)
    usable = mask & torch.isfinite(cov)
    assert int(chosen.sum()) == min(top_count(int(mask.sum()), ratio), int(usable.sum()))
    assert not (chosen & ~usable).any()
    if chosen.any() and (usable & ~chosen).any():
        assert cov[chosen].min() >= cov[usable & ~chosen].max()


def test_exact_top_with_a_given_threshold_and_tie_share():
    x = torch.tensor([[3.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    mask = torch.ones(2, 3)
    assert exact_top(x, mask, 3, threshold=1.0, ties=2).tolist() == [[True, True, True], [False, False, False]]
    assert exact_top(x, mask, 3, threshold=1.0, ties=0).tolist() == [[True, False, False], [False, False, False]]
    assert exact_top(x, mask, 2, largest=False).tolist() == [[False, True, False], [False, True, False]]
    assert not exact_top(x, mask, 0).any() and not exact_top(x, torch.zeros(2, 3), 2).any()
    assert int(exact_top(x, mask, 99).sum()) == 6


def test_random_subset_draws_exactly_count_among_tied_keys():
    candidates = torch.ones(3, 4, dtype=torch.bool)
    keys = torch.full((3, 4), 0.25)  # every key equal (float32 keys collide on big batches)
    assert int(random_subset(candidates, 5, keys).sum()) == 5


@pytest.mark.parametrize("seed", range(5))
def test_clip_cov_with_verls_draw_equals_verls_loss_and_its_own_draw_has_verls_count(seed):
    g = torch.Generator().manual_seed(seed)
    rows, cols = 6, 10
    mask = (torch.arange(cols) < torch.randint(1, cols + 1, (rows, 1), generator=g)).float()
    old = -torch.rand(rows, cols, generator=g, dtype=torch.float64) * 4
    lp = old + 0.4 * torch.randn(rows, cols, generator=g, dtype=torch.float64)
    adv = 2 * torch.randn(rows, cols, generator=g, dtype=torch.float64)
    lb, ub, ratio = -0.5, 2.0, 0.2
    candidates = oracle.verl_clip_cov_candidates(lp, old, adv, mask, lb=lb, ub=ub)
    k = max(1, int(ratio * mask.sum()))
    dropped = oracle.verl_clip_cov_draw(candidates, k, g)
    ours_lp, theirs_lp = lp.clone().requires_grad_(True), lp.clone().requires_grad_(True)
    loss, _ = POLICY_LOSSES["clip_cov"](ours_lp, old, adv, mask, selected=dropped, clip_cov_lb=lb, clip_cov_ub=ub,
                                        clip_cov_ratio=ratio)
    expected = oracle.verl_clip_cov_loss(theirs_lp, old, adv, mask, dropped)
    loss.backward()
    expected.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=REL, abs=1e-14)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=REL, atol=1e-14)
    # our own draw: exactly min(k, #candidates), all of them verl's candidates
    _, metrics = POLICY_LOSSES["clip_cov"](lp, old, adv, mask, clip_cov_lb=lb, clip_cov_ub=ub, clip_cov_ratio=ratio,
                                           generator=torch.Generator().manual_seed(seed))
    assert metrics["cov_selected_frac"].item() * mask.sum().item() == pytest.approx(min(k, int(candidates.sum())))
    ours = clip_cov_candidates(token_covariance(adv, lp, mask), mask, lb, ub)
    clipped = (-adv * torch.exp(lp - old).clamp(0.8, 1.2) > -adv * torch.exp(lp - old))
    assert torch.equal(ours & ~clipped, candidates)


class _World:
    """Two ranks as threads over one rendezvous: gather_objects / all_reduce_sum / rank, as
    steadyrl.distributed's are in a real run."""

    def __init__(self, size: int):
        self.size, self.slots, self.barrier, self.local = size, [None] * size, threading.Barrier(size), threading.local()

    def rank(self) -> int:
        return self.local.rank

    def gather_objects(self, obj):
        self.barrier.wait()
        self.slots[self.rank()] = obj
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out

    def all_reduce_sum(self, value) -> float:
        return float(sum(float(v) for v in self.gather_objects(float(value))))


@pytest.mark.parametrize("cut", [1, 3, 5])
def test_the_trainers_kl_cov_selection_is_exactly_k_over_ranks_with_equal_advantages(cut, monkeypatch):
    """Every covariance 0 (equal advantages): the ranks share the ties so that exactly k tokens are
    penalised over all of them, the same k as one process would."""
    import support

    batch = support.tiny_batch(seed=2, rows=6, response=5)
    batch = batch.__class__(**{**batch.__dict__, "advantages": torch.full_like(batch.advantages, 0.7)})
    algo = load_config(None, ["algorithm.policy_loss=kl_cov", "algorithm.kl_cov_ratio=0.3"]).algorithm
    alone = select_tokens(batch, algo).selected
    k = top_count(int(batch.loss_mask.sum()), 0.3)
    assert int(alone.sum()) == k
    world = _World(2)
    for name in ("rank", "gather_objects", "all_reduce_sum"):
        monkeypatch.setattr(distributed, name, getattr(world, name))
    parts, out = [batch.select(slice(0, cut)), batch.select(slice(cut, 6))], [None, None]

    def run(r):
        world.local.rank = r
        out[r] = select_tokens(parts[r], algo).selected

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert int(out[0].sum()) + int(out[1].sum()) == k
    assert torch.equal(torch.cat(out), alone)  # ties in rank then row order: the single process's choice


def test_the_oracles_import_nothing_from_steadyrl():
    """A shared helper would hide a shared bug: the oracle file stands on torch alone."""
    tree = ast.parse((Path(__file__).resolve().parents[1] / "support_oracles.py").read_text())
    names = [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names]
    names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert names and not [n for n in names if n.split(".")[0] == "steadyrl"], names
