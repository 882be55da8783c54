"""``truncation_correction``: what ``rollout.tis_cap`` does to a batch, as a ``Correction`` for the
``mismatch/`` metrics: a float64 oracle token by token, and hostile inputs (NaN, +-inf, +-1e30, every
dtype) that never give a NaN or inf count or a fraction outside [0, 1]."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional import mismatch_metrics
from steadyrl.functional.importance import truncated_importance_weights, truncation_correction

torch.set_num_threads(1)


def test_the_counts_match_a_float64_oracle_token_by_token():
    lp = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-1.0, -1.0, -1.0, 0.0]], dtype=torch.float64)
    rlp = torch.tensor([[-1.5, float("-inf"), float("nan"), -1.0], [-1.0, float("inf"), -4.0, 0.0]],
                       dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    cap = 1.5
    got = truncation_correction(lp, rlp, mask, cap)
    truncated = kept = 0
    for i in range(2):
        for j in range(4):
            if not mask[i, j] or math.isnan(float(rlp[i, j])):
                continue
            kept += 1
            d = max(-10.0, min(10.0, float(lp[i, j]) - float(rlp[i, j])))
            truncated += math.exp(d) > cap
    assert got.counts["truncated"] == truncated == 3  # e^0.5, -inf (e^10), e^3
    assert int(got.keep.sum()) == kept == 6 and not got.keep[0, 2]
    assert torch.equal(got.weights, truncated_importance_weights(lp, rlp, mask, cap)[0])
    m = mismatch_metrics(lp, rlp, mask, got)
    assert float(m["mismatch/masked_token_frac"]) == pytest.approx(1 / 7)
    assert float(m["mismatch/truncated_frac"]) == pytest.approx(3 / 7)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 4), t=st.integers(1, 6),
       dtype=st.sampled_from([torch.float64, torch.float32, torch.bfloat16, torch.float16]),
       scale=st.sampled_from([1e30, 50.0, 1.0]), poison=st.sampled_from([float("nan"), float("inf"), float("-inf")]),
       frac=st.sampled_from([0.0, 0.3, 1.0]), cap=st.sampled_from([0.5, 2.0, 1e4]))
def test_hostile_inputs_give_finite_counts_and_fractions_in_range(seed, b, t, dtype, scale, poison, frac, cap):
    g = torch.Generator().manual_seed(seed)
    limit = 6e4 if dtype == torch.float16 else scale
    lp = (torch.randn(b, t, generator=g, dtype=torch.float64) * scale).clamp(-limit, limit).to(dtype)
    rlp = (torch.randn(b, t, generator=g, dtype=torch.float64) * scale).clamp(-limit, limit).to(dtype)
    rlp = torch.where(torch.rand(b, t, generator=g) < frac, torch.tensor(poison, dtype=dtype), rlp)
    mask = torch.rand(b, t, generator=g) < 0.7
    got = truncation_correction(lp, rlp, mask, cap)
    assert all(bool(torch.isfinite(v)) for v in got.counts.values())
    assert bool(torch.isfinite(got.weights).all()) and (got.weights <= cap * (1 + 1e-6)).all()
    assert not got.keep[~mask].any() and not got.keep[torch.isnan(rlp)].any()
    m = {k: float(v) for k, v in mismatch_metrics(lp, rlp, mask, got).items()}
    for key in ("truncated_frac", "masked_token_frac", "masked_seq_frac"):
        assert 0 <= m[f"mismatch/{key}"] <= 1 + 1e-6
