"""Sequence and geometric importance ratios are sums of the raw per-token log-ratios, clamped after
summing (as verl does), and the mask bounds compare the unclamped log-ratio: a float64 oracle, written
with ``math``, for the cases an outside review found wrong (issue 30, B3 and B4), plus a hypothesis
test that the sums never go non-finite whatever the log-probs."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional import correct_mismatch, mismatch_metrics

torch.set_num_threads(1)


def _pair(diffs, dtype=torch.float64):
    """One row whose per-token log-ratios ``logp_train - logp_rollout`` are ``diffs``."""
    rlp = torch.full((1, len(diffs)), -1.0, dtype=torch.float64)
    lp = rlp + torch.tensor([diffs], dtype=torch.float64)
    return lp.to(dtype), rlp.to(dtype), torch.ones(1, len(diffs), dtype=torch.bool)


def oracle_sequence(diffs, cap=None, bounds=None):
    """The float64 sequence weight of a row: ``exp(sum d)`` (clamped to [-20, 20] before exp, as the
    weight is), kept iff the true ratio is inside ``bounds``."""
    total = math.fsum(diffs)
    if bounds is not None and not (math.log(bounds[0]) <= total <= math.log(bounds[1])):
        return 0.0
    w = math.exp(max(-20.0, min(20.0, total)))
    return min(w, cap) if cap is not None else w


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_sequence_whose_true_ratio_is_e_minus_30_is_dropped_by_the_mask(dtype):
    diffs = [60.0, -90.0]  # each beyond the per-token clamp of 40; true ratio exp(-30)
    lp, rlp, mask = _pair(diffs, dtype)
    got = correct_mismatch(lp, rlp, mask, level="sequence", modes={"mask": {"low": 0.5, "high": 5.0}})
    assert oracle_sequence(diffs, bounds=(0.5, 5.0)) == 0.0
    assert not got.keep.any() and got.weights.eq(0).all() and got.counts["masked"] == 2


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sequence_truncation_of_a_tiny_true_ratio_is_at_most_e_minus_20(dtype):
    lp, rlp, mask = _pair([60.0, -90.0], dtype)
    got = correct_mismatch(lp, rlp, mask, level="sequence", modes={"truncate": {"cap": 2.0}})
    want = oracle_sequence([60.0, -90.0], cap=2.0)
    assert want == pytest.approx(math.exp(-20))
    assert got.weights[0].tolist() == pytest.approx([want, want], rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_long_response_whose_geometric_mean_is_0985_fails_a_099_101_mask(dtype):
    n = 4000
    big = n * math.log(0.985)  # one broken token carries the whole gap: about -60.4
    diffs = [big] + [0.0] * (n - 1)
    assert math.exp(math.fsum(diffs) / n) == pytest.approx(0.985)
    lp, rlp, mask = _pair(diffs, dtype)
    got = correct_mismatch(lp, rlp, mask, modes={"geo_mask": {"low": 0.99, "high": 1.01}})
    assert not got.keep.any() and got.counts["masked_seqs"] == 1
    ratio = float(mismatch_metrics(lp, rlp, mask, got)["mismatch/ppl_ratio"])
    assert ratio == pytest.approx(1 / 0.985, rel=1e-5)  # exp(-mean d): the true mean, not the clamped one


@pytest.mark.parametrize("level,modes,diffs", [
    ("token", {"mask": {"low": math.exp(-10), "high": math.exp(10)}}, [15.0, -15.0, 0.0]),
    ("sequence", {"mask": {"low": math.exp(-20), "high": math.exp(20)}}, [12.5, 12.5]),
    ("sequence", {"mask": {"low": math.exp(-20), "high": math.exp(20)}}, [-12.5, -12.5]),
    ("token", {"geo_mask": {"low": math.exp(-40), "high": math.exp(40)}}, [50.0, 50.0]),
])
def test_mask_bounds_at_the_allowed_limit_drop_the_ratios_beyond_them(level, modes, diffs):
    lp, rlp, mask = _pair(diffs)
    got = correct_mismatch(lp, rlp, mask, level=level, modes=modes)
    if level == "token" and "mask" in modes:
        assert got.keep[0].tolist() == [False, False, True]  # e^15 and e^-15 are outside [e^-10, e^10]
    else:
        assert not got.keep.any()


def test_a_sequence_at_the_cap_limit_counts_as_truncated_when_its_true_ratio_is_beyond():
    lp, rlp, mask = _pair([12.5, 12.5])  # true ratio e^25, cap e^20
    got = correct_mismatch(lp, rlp, mask, level="sequence", modes={"truncate": {"cap": math.exp(20)}})
    assert got.counts["truncated"] == 2
    assert got.weights[0].tolist() == pytest.approx([math.exp(20)] * 2)


@settings(max_examples=60, deadline=None)
@given(diffs=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=8),
       dtype=st.sampled_from([torch.float64, torch.float32]),
       low=st.floats(-19.0, 0.0), width=st.floats(0.01, 19.0))
def test_sequence_weights_match_the_float64_oracle_for_any_finite_log_ratios(diffs, dtype, low, width):
    lp, rlp, mask = _pair(diffs, dtype)
    diffs = (lp.double() - rlp.double())[0].tolist()  # what the dtype holds
    bounds = (math.exp(low), math.exp(low + width))
    got = correct_mismatch(lp, rlp, mask, level="sequence", modes={"mask": {"low": bounds[0], "high": bounds[1]}})
    total = math.fsum(diffs)
    near = min(abs(total - low), abs(total - low - width))
    if near > 1e-3 * max(1.0, max(abs(d) for d in diffs)):  # float32 sums round near a bound
        want = oracle_sequence(diffs, bounds=bounds)
        assert got.weights[0].tolist() == pytest.approx([want] * len(diffs), rel=1e-4, abs=1e-30)
    assert bool(torch.isfinite(got.weights).all())


@settings(max_examples=60, deadline=None)
@given(scale=st.sampled_from([1e300, 1e150, 1e38, 1e6]), t=st.integers(1, 8), seed=st.integers(0, 2**31 - 1))
def test_sums_of_huge_float64_log_ratios_stay_finite_and_on_the_right_side(scale, t, seed):
    g = torch.Generator().manual_seed(seed)
    lp = (torch.rand(1, t, generator=g, dtype=torch.float64) * 2 - 1) * scale
    rlp = (torch.rand(1, t, generator=g, dtype=torch.float64) * 2 - 1) * scale
    mask = torch.ones(1, t, dtype=torch.bool)
    for level, modes in (("sequence", {"truncate": {"cap": 2.0}}), ("sequence", {"mask": {"low": 0.5, "high": 2.0}}),
                         ("token", {"geo_mask": {"low": 0.9, "high": 1.1}})):
        got = correct_mismatch(lp, rlp, mask, level=level, modes=modes)
        assert bool(torch.isfinite(got.weights).all()) and all(bool(torch.isfinite(v)) for v in got.counts.values())
    metrics = mismatch_metrics(lp, rlp, mask, got)
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
