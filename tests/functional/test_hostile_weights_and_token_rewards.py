"""Property tests on hostile inputs for the formulas issue 19 changed: the truncated
importance-sampling weights (a NaN behaviour log-prob weighs 0 and is counted) and the placement
of an episode's processed score on its tokens (every row sums to its processed score).

Hypothesis chooses the shapes, the mask lengths (all-masked rows, single tokens), the magnitudes
(log-probs of -1e4, NaN and +-inf, rewards of +-1e6 and 1e-30, equal rewards) and the settings.
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional.importance import rollout_mismatch_metrics, truncated_importance_weights

torch.set_num_threads(1)
FAST = settings(max_examples=80, deadline=None)
SPECIAL = [float("nan"), float("inf"), float("-inf"), -1e4, 0.0, -1e-30]


@st.composite
def logprob_batches(draw):
    b, t = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    lengths = draw(st.lists(st.sampled_from([0, 1, t, *range(t + 1)]), min_size=b, max_size=b))
    mask = (torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scale = draw(st.sampled_from([1.0, 30.0, 1e4]))
    logp = -(torch.rand(b, t, generator=g) * scale)
    rollout = logp + torch.randn(b, t, generator=g) * scale
    for _ in range(draw(st.integers(0, 4))):  # special values anywhere, padding included
        i, j = draw(st.integers(0, b - 1)), draw(st.integers(0, t - 1))
        rollout[i, j] = draw(st.sampled_from(SPECIAL))
    return logp, rollout, mask


@FAST
@given(x=logprob_batches(), cap=st.sampled_from([1.0, 2.0, 1e6]))
def test_tis_weights_stay_in_zero_cap_and_nan_behaviour_logprobs_weigh_nothing(x, cap):
    logp, rollout, mask = x
    w, metrics = truncated_importance_weights(logp, rollout, mask, cap)
    nan_valid = mask.bool() & rollout.isnan()
    assert torch.isfinite(w).all() and (w >= 0).all() and (w <= cap).all()
    assert (w[~mask.bool()] == 0).all() and (w[nan_valid] == 0).all()
    usable = mask.bool() & ~rollout.isnan()
    assert (w[usable] > 0).all()  # exp(-10) at worst: every usable token keeps some weight
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics["rollout/nan_logprob_tokens"] == float(nan_valid.sum())
    assert 0.0 <= metrics["rollout/tis_clip_frac"] <= 1.0
    assert rollout_mismatch_metrics(logp, rollout, mask) == {
        k: metrics[k] for k in ("rollout/logprob_diff_mean", "rollout/nan_logprob_tokens")}
