"""Every advantage estimator and ``compute_advantages`` against a float64 oracle.

The oracles walk rows and tokens with Python floats: GAE and REINFORCE++ step backwards over the
valid tokens of each row, the outcome estimators loop over groups and samples.
"""

import math
import statistics

import pytest
import torch

from steadyrl.functional import (
    ADVANTAGE_ESTIMATORS,
    compute_advantages,
    gae_advantages,
    grpo_advantages,
    grpo_passk_advantages,
    opo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    rloo_advantages,
)
from steadyrl.functional.constants import NORM_EPS, WHITEN_EPS

from support import ALL_DTYPES, out_dtype

TOL = {torch.float64: dict(rtol=1e-7, atol=1e-7), torch.float32: dict(rtol=3e-5, atol=3e-5),
       torch.bfloat16: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=1e-4, atol=1e-4)}


def mask_case(seed, B, T):
    """Right-padded bool mask with random lengths 0..T (row 0 empty, row 1 of length 1, last full)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0], lengths[1], lengths[-1] = 0, 1, T
    return torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)


def token_case(seed, B=6, T=7, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    mask = mask_case(seed, B, T)
    r = torch.randn(B, T, generator=g, dtype=torch.float64)
    v = torch.randn(B, T, generator=g, dtype=torch.float64)
    garbage = torch.full((B, T), 1e4, dtype=torch.float64)
    r = torch.where(mask, r, garbage).to(dtype)
    v = torch.where(mask, v, -garbage).to(dtype)
    return r, v, mask


def score_case(seed, groups=5, n=4, dtype=torch.float32, binary=False):
    g = torch.Generator().manual_seed(seed)
    if binary:
        s = (torch.rand(groups * n, generator=g) < 0.5).to(torch.float64)
    else:
        s = torch.randn(groups * n, generator=g, dtype=torch.float64) * 2 + 1
    if n > 1 and groups > 2:
        s[n : 2 * n] = s[n]  # one group of equal scores
    return s.to(dtype)


def broadcast(per_seq, mask):
    B, T = mask.shape
    return torch.tensor([[per_seq[b] if mask[b, t] else 0.0 for t in range(T)] for b in range(B)],
                        dtype=torch.float64)


def whiten_oracle(x, mask):
    vals = [x[b][t] for b in range(len(x)) for t in range(len(x[0])) if mask[b, t]]
    mean = statistics.fmean(vals) if vals else 0.0
    var = statistics.variance(vals) if len(vals) > 1 else 0.0
    inv = 1.0 / math.sqrt(var + WHITEN_EPS)
    return torch.tensor([[(x[b][t] - mean) * inv if mask[b, t] else 0.0 for t in range(len(x[0]))]
                         for b in range(len(x))], dtype=torch.float64)


def groups_of(s, n):
    vals = [float(v) for v in s]
    return [vals[i : i + n] for i in range(0, len(vals), n)]


def check(out, expected, dtype):
    assert out.dtype == out_dtype(dtype)
    torch.testing.assert_close(out.double(), expected, **TOL[dtype])


# --- GAE ------------------------------------------------------------------------------------------


def gae_oracle(r, v, mask, gamma, lam):
    B, T = mask.shape
    adv = [[0.0] * T for _ in range(B)]
    ret = [[0.0] * T for _ in range(B)]
    for b in range(B):
        idx = [t for t in range(T) if mask[b, t]]
        next_v, next_a = 0.0, 0.0
        for t in reversed(idx):
            delta = float(r[b, t]) + gamma * next_v - float(v[b, t])
            a = delta + gamma * lam * next_a
            adv[b][t], ret[b][t] = a, a + float(v[b, t])
            next_v, next_a = float(v[b, t]), a
    return torch.tensor(adv, dtype=torch.float64), torch.tensor(ret, dtype=torch.float64)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.99, 1.0), (0.9, 0.5), (1.0, 0.0)])
def test_gae_matches_the_backward_loop_over_valid_tokens(dtype, gamma, lam):
    r, v, mask = token_case(3, dtype=dtype)
    adv, ret = gae_advantages(r, v, mask, gamma=gamma, lam=lam)
    exp_adv, exp_ret = gae_oracle(r.double(), v.double(), mask, gamma, lam)
    check(adv, exp_adv, dtype)
    check(ret, exp_ret, dtype)


def test_gae_skips_holes_in_the_mask_as_it_skips_padding():
    r, v, mask = token_case(4, B=3, T=6, dtype=torch.float64)
    holes = mask.clone()
    holes[2, 2] = False
    holes[2, 4] = False
    adv, ret = gae_advantages(r, v, holes, gamma=0.97, lam=0.9)
    exp_adv, exp_ret = gae_oracle(r, v, holes, 0.97, 0.9)
    torch.testing.assert_close(adv, exp_adv, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ret, exp_ret, rtol=1e-12, atol=1e-12)


# --- REINFORCE++ ----------------------------------------------------------------------------------


def rpp_oracle(r, mask, gamma):
    B, T = mask.shape
    g = [[0.0] * T for _ in range(B)]
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            if mask[b, t]:
                running = float(r[b, t]) + gamma * running
                g[b][t] = running
    return whiten_oracle(g, mask)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus_whitens_the_discounted_return_to_go(dtype, gamma):
    r, _, mask = token_case(5, dtype=dtype)
    check(reinforce_plus_plus_advantages(r, mask, gamma=gamma), rpp_oracle(r.double(), mask, gamma), dtype)


def test_reinforce_plus_plus_leaves_invalid_samples_out_of_the_whitening():
    r, _, mask = token_case(6, dtype=torch.float64)
    valid = torch.ones(mask.shape[0], dtype=torch.bool)
    valid[1] = False  # its reward function failed: its tokens must not move the batch statistics
    out = reinforce_plus_plus_advantages(r, mask, gamma=0.95, sample_mask=valid)
    check(out, rpp_oracle(r, mask & valid.unsqueeze(-1), 0.95), torch.float64)
    r2 = r.clone()
    r2[1] = 1e6  # whatever the invalid row holds
    torch.testing.assert_close(reinforce_plus_plus_advantages(r2, mask, gamma=0.95, sample_mask=valid), out)


# --- outcome estimators ---------------------------------------------------------------------------


def grpo_oracle(s, n, mask, norm_by_std=True):
    per = []
    for grp in groups_of(s, n):
        mean = statistics.fmean(grp)
        std = statistics.stdev(grp) if n > 1 else 0.0
        for x in grp:
            per.append((x - mean) / (std + NORM_EPS) if norm_by_std else x - mean)
    return broadcast(per, mask)


def rloo_oracle(s, n, mask):
    per = []
    for grp in groups_of(s, n):
        for i, x in enumerate(grp):
            others = grp[:i] + grp[i + 1 :]
            per.append(x - statistics.fmean(others) if others else 0.0)
    return broadcast(per, mask)


def rpp_baseline_oracle(s, n, mask):
    per = []
    for grp in groups_of(s, n):
        mean = statistics.fmean(grp)
        per += [x - mean for x in grp]
    B, T = mask.shape
    return whiten_oracle([[per[b]] * T for b in range(B)], mask)


def opo_oracle(s, n, mask):
    lengths = [int(mask[b].sum()) for b in range(mask.shape[0])]
    per = []
    for gi, grp in enumerate(groups_of(s, n)):
        if n == 1:
            per.append(0.0)
            continue
        L = lengths[gi * n : gi * n + n]
        total = sum(L)
        base = math.fsum(l * x for l, x in zip(L, grp)) / total if total else statistics.fmean(grp)
        per += [x - base for x in grp]
    return broadcast(per, mask)


def passk_oracle(s, n, mask, norm_by_std=True):
    per = []
    for grp in groups_of(s, n):
        out = [0.0] * n
        if n > 1:
            best = max(range(n), key=lambda i: (grp[i], -i))  # first of the maxima
            second = max(grp[:best] + grp[best + 1 :])
            gap = grp[best] - second
            if norm_by_std:
                gap /= statistics.stdev(grp) + NORM_EPS
            out[best] = gap
        per += out
    return broadcast(per, mask)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_the_group_loop(dtype, n, norm_by_std):
    s = score_case(n, n=n, dtype=dtype)
    mask = mask_case(n, len(s), 5)
    check(grpo_advantages(s, mask, n, norm_by_std=norm_by_std), grpo_oracle(s.double(), n, mask, norm_by_std), dtype)


def test_grpo_custom_eps_is_used():
    s = torch.tensor([0.0, 1.0], dtype=torch.float64)
    mask = torch.ones(2, 1, dtype=torch.bool)
    std = math.sqrt(0.5)
    out = grpo_advantages(s, mask, 2, eps=0.5)
    torch.testing.assert_close(out[:, 0], torch.tensor([-0.5, 0.5], dtype=torch.float64) / (std + 0.5))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n", [1, 2, 5])
def test_rloo_is_score_minus_leave_one_out_mean(dtype, n):
    s = score_case(10 + n, n=n, dtype=dtype)
    mask = mask_case(n, len(s), 4)
    check(rloo_advantages(s, mask, n), rloo_oracle(s.double(), n, mask), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n", [1, 3, 4])
def test_reinforce_plus_plus_baseline_whitens_group_centred_scores(dtype, n):
    s = score_case(20 + n, n=n, dtype=dtype)
    mask = mask_case(20 + n, len(s), 6)
    check(reinforce_plus_plus_baseline_advantages(s, mask, n), rpp_baseline_oracle(s.double(), n, mask), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n", [1, 2, 4])
def test_opo_uses_the_length_weighted_group_baseline(dtype, n):
    s = score_case(30 + n, n=n, dtype=dtype)
    mask = mask_case(30 + n, len(s), 6)
    if n > 1:
        mask[:n] = False  # a group whose responses are all empty: plain mean baseline, all 0 on tokens
    check(opo_advantages(s, mask, n), opo_oracle(s.double(), n, mask), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_passk_credits_only_the_best_sample_with_the_top_two_gap(dtype, n, binary, norm_by_std):
    s = score_case(40 + n, n=n, dtype=dtype, binary=binary)
    mask = mask_case(40 + n, len(s), 4)
    out = grpo_passk_advantages(s, mask, n, norm_by_std=norm_by_std)
    check(out, passk_oracle(s.double(), n, mask, norm_by_std), dtype)


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_compute_advantages_dispatches_to_the_estimator(name):
    est = ADVANTAGE_ESTIMATORS[name]
    n = 4
    r, v, mask = token_case(50, B=8, T=5)
    s = score_case(50, groups=2, n=n)
    adv, ret = compute_advantages(name, mask, scores=s, token_rewards=r, values=v, group_size=n)
    if name == "gae":
        exp_adv, exp_ret = gae_advantages(r, v, mask)
        torch.testing.assert_close(adv, exp_adv, rtol=0, atol=0)
        torch.testing.assert_close(ret, exp_ret, rtol=0, atol=0)
        kw_adv, _ = compute_advantages(name, mask, token_rewards=r, values=v, gamma=0.5, lam=0.5)
        torch.testing.assert_close(kw_adv, gae_advantages(r, v, mask, gamma=0.5, lam=0.5)[0])
        return
    expected = est.fn(s, mask, n) if est.uses == "scores" else est.fn(r, mask)
    torch.testing.assert_close(adv, expected, rtol=0, atol=0)
    assert ret is adv or torch.equal(ret, adv)
    assert adv[~mask].eq(0).all()


def test_every_listed_estimator_is_registered():
    expected = {"gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "opo", "grpo_passk"}
    assert expected <= set(ADVANTAGE_ESTIMATORS)


def test_compute_advantages_forwards_norm_by_std():
    s = score_case(60, groups=3, n=4)
    mask = mask_case(60, 12, 3)
    adv, _ = compute_advantages("grpo", mask, scores=s, group_size=4, norm_by_std=False)
    torch.testing.assert_close(adv.double(), grpo_oracle(s.double(), 4, mask, norm_by_std=False), rtol=3e-5, atol=3e-5)


def test_estimators_do_not_mutate_their_inputs():
    r, v, mask = token_case(70, B=8, T=5)
    s = score_case(70, groups=2, n=4)
    before = [t.clone() for t in (r, v, mask, s)]
    for name in ADVANTAGE_ESTIMATORS:
        compute_advantages(name, mask, scores=s, token_rewards=r, values=v, group_size=4)
    assert all(torch.equal(a, b) for a, b in zip(before, (r, v, mask, s)))


def test_an_estimator_declaring_an_option_it_does_not_take_is_refused_at_registration():
    from steadyrl.functional.advantages import register_advantage

    with pytest.raises(ValueError, match=r"declares \['lam'\]"):
        @register_advantage("needs_lam_but_takes_none", uses="scores", options=("lam",), masks_samples=False)
        def _estimator(scores, response_mask, group_size):
            return scores
    assert "needs_lam_but_takes_none" not in ADVANTAGE_ESTIMATORS


def test_the_trainer_passes_an_estimator_what_it_declared(monkeypatch):
    """A new estimator is one decorated function: the reward pipeline passes it the algorithm
    options it declared (and the sample mask when it takes one), nothing else."""
    from steadyrl.config.schema import AlgorithmConfig
    from steadyrl.functional.advantages import AdvantageEstimator
    from steadyrl.trainer.processing import _estimator_options

    def fn(scores, response_mask, group_size, gamma=1.0):
        return scores

    monkeypatch.setitem(ADVANTAGE_ESTIMATORS, "new_one", AdvantageEstimator("new_one", fn, "scores", options=("gamma",),
                                                                            masks_samples=False))
    algo = AlgorithmConfig(gamma=0.5).model_copy(update={"advantage_estimator": "new_one"})
    valid = torch.ones(4, dtype=torch.bool)
    assert _estimator_options(algo, valid) == {"gamma": 0.5}
    grpo = AlgorithmConfig(norm_by_std=False)
    options = _estimator_options(grpo, valid)
    assert options.keys() == {"norm_by_std", "group_stats", "episode_size", "sample_mask"}
    assert options["norm_by_std"] is False and options["group_stats"] == "episode" and options["episode_size"] == 1
