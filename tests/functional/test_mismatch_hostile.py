"""Property tests of the mismatch corrections and metrics on hostile inputs: log-probs of +-1e30 and
1e-30, fp16 / bf16, empty and all-masked rows, NaN and inf behaviour log-probs. No value or gradient
is ever NaN or inf, weights stay in their bounds, and a non-finite behaviour log-prob on a policy
token is dropped and counted (the house style of test_hostile_inputs.py)."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional import correct_mismatch, mismatch_metrics

torch.set_num_threads(1)

FAST = settings(max_examples=60, deadline=None)
DTYPES = st.sampled_from([torch.float64, torch.float32, torch.bfloat16, torch.float16])
SCALES = st.sampled_from([1e30, 1e4, 50.0, 1.0, 1e-30])
SEEDS = st.integers(0, 2**31 - 1)
MODES = st.sampled_from([
    {},
    {"truncate": {"cap": 2.0}},
    {"mask": {"low": 0.5, "high": 5.0}},
    {"reject": {"low": 0.5, "high": 5.0}},
    {"mask": {"low": 0.5, "high": 2.0}, "truncate": {"cap": 1.5}},
    {"geo_mask": {"low": 0.999, "high": 1.001}},
    {"geo_mask": {"low": 0.9, "high": 1.1}, "truncate": {"cap": 2.0}},
])


@st.composite
def hostile(draw):
    """(train log-probs, behaviour log-probs, mask, where the behaviour is non-finite)."""
    b, t = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    dtype, seed = draw(DTYPES), draw(SEEDS)
    lengths = draw(st.lists(st.sampled_from([t, 1, 0, *range(t + 1)]), min_size=b, max_size=b))
    mask = torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    g = torch.Generator().manual_seed(seed)
    limit = 6e4 if dtype == torch.float16 else (1e30 if dtype != torch.float64 else 1e300)

    def logprobs(scale):
        x = -(torch.randn(b, t, generator=g, dtype=torch.float64).abs() * scale)
        if draw(st.booleans()):  # hostile: positive "log-probs" too
            x = x.neg()
        return x.clamp(-limit, limit).to(dtype)

    lp, rlp = logprobs(draw(SCALES)), logprobs(draw(SCALES))
    bad = torch.rand(b, t, generator=g) < draw(st.sampled_from([0.0, 0.3, 1.0]))
    poison = draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    rlp = torch.where(bad, torch.tensor(poison, dtype=dtype), rlp)
    return lp, rlp, mask, bad


def finite(*tensors):
    return all(bool(torch.isfinite(t).all()) for t in tensors)


@FAST
@given(data=hostile(), modes=MODES, level=st.sampled_from(["token", "sequence"]))
def test_corrections_are_finite_bounded_and_drop_every_non_finite_token(data, modes, level):
    lp, rlp, mask, bad = data
    lp = lp.clone().requires_grad_(True)
    got = correct_mismatch(lp, rlp, mask, level=level, modes=modes)
    assert finite(got.weights) and got.weights.dtype in (torch.float32, torch.float64)
    assert (got.weights >= 0).all() and got.weights[~got.keep].eq(0).all()
    if "truncate" in modes:
        assert (got.weights <= modes["truncate"]["cap"] * (1 + 1e-6)).all()
    elif "mask" in modes:
        assert (got.weights <= modes["mask"]["high"] * (1 + 1e-6)).all()
    assert not got.keep[bad | ~mask].any()  # never weighted 1: non-finite and padding are out
    assert got.counts["nonfinite"] == int((bad & mask).sum())
    assert all(finite(v) for v in got.counts.values())
    if got.weights.requires_grad:  # no correction, geo_mask alone: constant weights
        got.weights.sum().backward()
        assert lp.grad is not None and finite(lp.grad)


@FAST
@given(data=hostile(), modes=MODES)
def test_metrics_are_finite_in_range_and_carry_no_gradient(data, modes):
    lp, rlp, mask, bad = data
    lp = lp.clone().requires_grad_(True)
    metrics = mismatch_metrics(lp, rlp, mask, correct_mismatch(lp, rlp, mask, modes=modes))
    assert all(finite(v) for v in metrics.values()), metrics
    m = {k.removeprefix("mismatch/"): float(v) for k, v in metrics.items()}
    assert m["k3"] >= 0 and m["k3"] <= 10 and abs(m["k1"]) <= 40
    assert 0 < m["ess"] <= 1 + 1e-6
    assert math.exp(-10) * (1 - 1e-6) <= m["ratio_min"] <= m["ratio_max"] <= math.exp(10) * (1 + 1e-6)
    for frac in ("truncated_frac", "masked_token_frac", "masked_seq_frac"):
        assert 0 <= m[frac] <= 1 + 1e-6, frac
    assert m["nonfinite_tokens"] == int((bad & mask).sum())
    if not (mask & ~bad).any():
        assert m["k1"] == m["k3"] == 0 and m["ess"] == m["ppl_ratio"] == 1
    assert not any(v.requires_grad for v in metrics.values())  # a measurement, never a loss term


@FAST
@given(data=hostile())
def test_all_masked_sequences_give_zero_weights_and_neutral_metrics(data):
    lp, rlp, mask, _ = data
    empty = torch.zeros_like(mask)
    got = correct_mismatch(lp, rlp, empty, level="sequence", modes={"truncate": {"cap": 2.0}})
    assert got.weights.eq(0).all() and not got.keep.any()
    assert all(float(v) == 0 for v in got.counts.values())
    m = {k: float(v) for k, v in mismatch_metrics(lp, rlp, empty, got).items()}
    assert m["mismatch/k1"] == 0 and m["mismatch/ess"] == 1 and m["mismatch/masked_seq_frac"] == 0
