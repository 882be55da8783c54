"""Reward clipping, clip fractions, group statistics, normalisation and the difficulty mask and
weights, against float64 oracles written as loops over groups and samples."""

import itertools
import math
import statistics

import pytest
import torch

from steadyrl.functional import (
    NORM_TYPES,
    RunningMoments,
    clip_fraction,
    clip_rewards,
    difficulty_mask,
    difficulty_weights,
    group_mean_std,
    normalize_rewards,
)
from steadyrl.functional.constants import NORM_EPS

from support import ALL_DTYPES, out_dtype

TOL = {torch.float64: dict(rel=1e-7, abs=1e-7), torch.float32: dict(rel=2e-5, abs=2e-5),
       torch.bfloat16: dict(rel=1e-4, abs=1e-4), torch.float16: dict(rel=1e-4, abs=1e-4)}


def scores_case(seed, groups=5, n=4, dtype=torch.float32, scale=2.0, with_mask=True):
    """``[groups*n]`` scores, their float64 view after rounding to ``dtype``, and a validity mask
    with one fully invalid group, one group with one valid sample, and random holes."""
    g = torch.Generator().manual_seed(seed)
    s = (torch.randn(groups * n, generator=g, dtype=torch.float64) * scale + 0.3).to(dtype)
    if not with_mask:
        return s, s.double(), None
    mask = torch.rand(groups * n, generator=g) < 0.75
    mask[:n] = False
    mask[n : 2 * n] = False
    mask[n] = True
    mask[-n:] = True
    return s, s.double(), mask


def valid(mask, i):
    return True if mask is None else bool(mask[i])


def oracle_group_stats(s, n, mask):
    """Per-sample (group mean, unbiased group std) over the group's valid samples."""
    means, stds = [], []
    for g0 in range(0, len(s), n):
        vals = [float(s[i]) for i in range(g0, g0 + n) if valid(mask, i)]
        mean = statistics.fmean(vals) if vals else 0.0
        std = statistics.stdev(vals) if len(vals) > 1 else 0.0
        means += [mean] * n
        stds += [std] * n
    return means, stds


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_clip_rewards_clamps_symmetrically_in_float32(dtype):
    x = torch.tensor([-100.0, -5.0, -4.5, 0.0, 3.0, 5.0, 7.25, 1e4]).to(dtype)
    out = clip_rewards(x, 5.0)
    assert out.dtype == out_dtype(dtype)
    assert out.tolist() == [max(-5.0, min(5.0, float(v))) for v in x.double()]
    none = clip_rewards(x, None)
    assert none.dtype == out_dtype(dtype) and none.tolist() == x.double().tolist()
    tok = torch.tensor([[-9.0, 1.0], [2.0, 8.0]]).to(dtype)
    assert clip_rewards(tok, 3.0).tolist() == [[-3.0, 1.0], [2.0, 3.0]]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clip_fraction_counts_valid_entries_outside_the_range(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(6, 9, generator=g) * 3).to(dtype)
    lengths = torch.randint(0, 10, (6,), generator=g)
    mask = torch.arange(9) < lengths.unsqueeze(1)
    low, high = -1.5, 2.0
    out = clip_fraction(x, low, high, mask)
    assert out.dtype == torch.float32
    n_valid = outside = 0
    for b in range(6):
        for t in range(9):
            if mask[b, t]:
                n_valid += 1
                v = float(x[b, t])
                outside += v < low or v > high
    assert out.item() == pytest.approx(outside / n_valid if n_valid else 0.0, rel=1e-6)
    everything = clip_fraction(x, low, high)
    n_out_all = sum(float(v) < low or float(v) > high for v in x.flatten())
    assert everything.item() == pytest.approx(n_out_all / x.numel(), rel=1e-6)
    assert clip_fraction(x, low, high, torch.zeros_like(mask)).item() == 0.0


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("with_mask", [False, True])
def test_group_mean_std_matches_the_loop(dtype, n, with_mask):
    s, so, mask = scores_case(n, groups=5, n=n, dtype=dtype, with_mask=with_mask)
    mean, std = group_mean_std(s, n, mask)
    assert mean.shape == std.shape == s.shape
    assert mean.dtype == std.dtype == out_dtype(dtype)
    exp_mean, exp_std = oracle_group_stats(so, n, mask)
    for i in range(len(s)):
        assert mean[i].item() == pytest.approx(exp_mean[i], **TOL[dtype])
        assert std[i].item() == pytest.approx(exp_std[i], **TOL[dtype])


def oracle_normalize(so, n, mask, mean_type, std_type, seen_before):
    """Expected output of normalize_rewards; ``seen_before`` are the values the RunningMoments
    object held before the call (the call merges this batch's valid values first)."""
    valid_vals = [float(so[i]) for i in range(len(so)) if valid(mask, i)]
    g_mean, g_std = oracle_group_stats(so, n, mask)
    everything = seen_before + valid_vals
    if mean_type == "batch":
        means = [statistics.fmean(valid_vals) if valid_vals else 0.0] * len(so)
    elif mean_type == "group":
        means = g_mean
    elif mean_type == "running":
        means = [statistics.fmean(everything)] * len(so)
    else:
        means = [0.0] * len(so)
    if std_type == "batch":
        stds = [statistics.stdev(valid_vals) if len(valid_vals) > 1 else 0.0] * len(so)
    elif std_type == "group":
        stds = g_std
    elif std_type == "running":
        stds = [statistics.stdev(everything) if len(everything) > 1 else 0.0] * len(so)
    else:
        stds = None
    out = []
    for i in range(len(so)):
        if not valid(mask, i):
            out.append(0.0)
        elif stds is None:
            out.append(float(so[i]) - means[i])
        else:
            out.append((float(so[i]) - means[i]) / (stds[i] + NORM_EPS))
    return out


@pytest.mark.parametrize("mean_type,std_type", list(itertools.product(NORM_TYPES, NORM_TYPES)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("with_mask", [False, True])
def test_normalize_rewards_matches_the_oracle_for_every_mean_and_std_type(mean_type, std_type, dtype, with_mask):
    n = 4
    s, so, mask = scores_case(7, groups=5, n=n, dtype=dtype, with_mask=with_mask)
    running = None
    seen = []
    if "running" in (mean_type, std_type):
        running = RunningMoments()
        previous = torch.tensor([1.5, -0.25, 4.0, 2.0, 0.5], dtype=torch.float64)
        running.update(previous)
        seen = previous.tolist()
    out = normalize_rewards(s, n, mean_type, std_type, running=running, mask=mask)
    assert out.dtype == out_dtype(dtype) and out.shape == s.shape
    expected = oracle_normalize(so, n, mask, mean_type, std_type, seen)
    # group/batch std near zero amplifies float32 rounding of the mean; compare at the scale of
    # the spread of the scores
    tol = dict(TOL[dtype])
    for i in range(len(s)):
        assert out[i].item() == pytest.approx(expected[i], **tol), (i, out.tolist(), expected)
    if running is not None:
        n_valid = len(s) if mask is None else int(mask.sum())
        assert running.count == pytest.approx(len(seen) + n_valid)  # merged once, not twice


def test_normalize_rewards_default_is_grpo_group_normalisation():
    s, so, _ = scores_case(3, groups=3, n=4, with_mask=False)
    expected = oracle_normalize(so, 4, None, "group", "group", [])
    assert normalize_rewards(s, 4).tolist() == pytest.approx(expected, rel=2e-5, abs=2e-5)


def test_normalize_rewards_does_not_mutate_inputs():
    s, _, mask = scores_case(4)
    s0, m0 = s.clone(), mask.clone()
    normalize_rewards(s, 4, "batch", "batch", mask=mask)
    assert torch.equal(s, s0) and torch.equal(mask, m0)


def oracle_accuracy(so, n, mask):
    means, _ = oracle_group_stats(so, n, mask)
    return means


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("with_mask", [False, True])
def test_difficulty_mask_keeps_groups_strictly_between_low_and_high(n, with_mask):
    g = torch.Generator().manual_seed(n)
    groups = 12
    s = (torch.rand(groups * n, generator=g) < torch.rand(groups, generator=g).repeat_interleave(n)).float()
    s[:n] = 0.0          # too hard
    s[n : 2 * n] = 1.0   # too easy
    mask = None
    if with_mask:
        mask = torch.rand(groups * n, generator=g) < 0.8
    keep = difficulty_mask(s, n, mask=mask)
    assert keep.dtype == torch.bool and keep.shape == s.shape
    if n == 1:
        assert keep.all()
        return
    acc = oracle_accuracy(s.double(), n, mask)
    assert keep.tolist() == [0.1 < a < 0.95 for a in acc]
    assert not keep[: 2 * n].any()  # accuracy 0 and 1 (or no valid sample) are both out
    custom = difficulty_mask(s, n, low=0.3, high=0.6, mask=mask)
    assert custom.tolist() == [0.3 < a < 0.6 for a in acc]


def test_difficulty_mask_boundaries_are_exclusive():
    s = torch.tensor([0.1, 0.1, 0.95, 0.95, 0.5, 0.5])
    assert difficulty_mask(s, 2).tolist() == [False, False, False, False, True, True]


@pytest.mark.parametrize("n", [1, 3, 4])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_difficulty_weights_match_the_linear_rule(n, dtype):
    g = torch.Generator().manual_seed(n)
    s = (torch.rand(6 * n, generator=g) < 0.5).to(dtype)
    s[:n] = 0
    s[n : 2 * n] = 1
    if n > 1:
        s[2 * n] = 1.7   # a score above 1 can lift a group mean above 1: the accuracy is clamped to 1
    w = difficulty_weights(s, n)
    assert w.dtype == out_dtype(dtype)
    acc = oracle_accuracy(s.double(), n, None)
    for i in range(len(s)):
        a = min(max(acc[i], 0.0), 1.0)
        assert w[i].item() == pytest.approx(0.5 + 1.5 * (1.0 - a), rel=1e-6)
    assert w[:n].eq(2.0).all() and w[n : 2 * n].eq(0.5).all()
    w2 = difficulty_weights(s, n, min_weight=1.0, max_weight=3.0)
    for i in range(len(s)):
        a = min(max(acc[i], 0.0), 1.0)
        assert w2[i].item() == pytest.approx(1.0 + 2.0 * (1.0 - a), rel=1e-6)


def test_difficulty_weights_respect_the_validity_mask():
    s = torch.tensor([1.0, 0.0, 0.0, 0.0])
    mask = torch.tensor([True, False, True, False])
    w = difficulty_weights(s, 4, mask=mask)
    assert w.tolist() == pytest.approx([0.5 + 1.5 * 0.5] * 4)
    assert math.isclose(difficulty_weights(s, 4).tolist()[0], 0.5 + 1.5 * 0.75, rel_tol=1e-6)


def test_invalid_samples_holding_nan_or_inf_enter_no_statistic():
    scores = torch.tensor([1.0, float("nan"), 0.0, 2.0, float("inf"), 3.0])
    mask = torch.tensor([True, False, True, True, False, True])
    clean = torch.where(mask, scores, torch.tensor(-7.0))
    for mean_type, std_type in itertools.product(NORM_TYPES, NORM_TYPES):
        out = normalize_rewards(scores, 3, mean_type, std_type, running=RunningMoments(), mask=mask)
        ref = normalize_rewards(clean, 3, mean_type, std_type, running=RunningMoments(), mask=mask)
        assert torch.equal(out, ref), (mean_type, std_type)
        assert out[~mask].eq(0).all()
    for fn in (group_mean_std, difficulty_mask, difficulty_weights):
        a, b = fn(scores, 3, mask=mask), fn(clean, 3, mask=mask)
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            assert torch.equal(x, y), fn.__name__
    assert clip_fraction(scores, 0.0, 1.0, mask).item() == 0.5
