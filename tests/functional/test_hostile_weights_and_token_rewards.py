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

from steadyrl.functional import (
    NORM_TYPES,
    RunningMoments,
    clip_rewards,
    episode_reward_scale,
    episode_token_rewards,
    normalize_rewards,
)
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


SCALES = {"huge": 1e6, "extreme": 1e30, "tiny": 1e-30, "unit": 1.0}


@st.composite
def episode_batches(draw):
    n = draw(st.sampled_from([1, 2, 3, 4]))
    b, t = n * draw(st.integers(1, 3)), draw(st.integers(1, 6))
    lengths = draw(st.lists(st.sampled_from([0, 1, t, *range(t + 1)]), min_size=b, max_size=b))
    mask = torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    kind = draw(st.sampled_from([*SCALES, "equal", "cancel"]))
    scale = SCALES.get(kind, 1.0)
    where = torch.rand(b, t, generator=g) < 0.4
    turns = torch.where(where, torch.randn(b, t, generator=g, dtype=torch.float64) * scale,
                        torch.zeros((), dtype=torch.float64))
    if kind == "equal":
        raw = torch.full((b,), draw(st.sampled_from([0.0, 1.0, -1e6, 1e30])), dtype=torch.float64)
    elif kind == "cancel":  # turn rewards that sum to exactly the score: x = 0 with +-5 turns
        turns[:, :1], raw = 5.0, torch.zeros(b, dtype=torch.float64)
        turns[:, -1:] = -5.0
    else:
        raw = torch.randn(b, generator=g, dtype=torch.float64) * scale
    valid = torch.tensor(draw(st.lists(st.booleans(), min_size=b, max_size=b))) & mask.any(-1)
    return n, raw, turns, mask, valid


@FAST
@given(x=episode_batches(), clip=st.sampled_from([None, 1.0, 10.0]),
       mean_type=st.sampled_from(NORM_TYPES), std_type=st.sampled_from(NORM_TYPES))
def test_every_episode_row_sums_to_its_processed_score_on_hostile_batches(x, clip, mean_type, std_type):
    """The score chain (clip, normalise, clip) and its placement, as the trainer runs it: finite,
    0 on padding and on invalid rows, each row summing to its processed score ``p`` (within
    float64 rounding of the row's parts), ``|p| <= clip``."""
    n, raw, turns, mask, valid = x
    raw = torch.where(valid, raw, torch.zeros((), dtype=torch.float64))
    clipped = clip_rewards(raw, clip)
    s, slope = normalize_rewards(clipped, n, mean_type, std_type, running=RunningMoments(), mask=valid,
                                 return_scale=True)
    p = clip_rewards(s, clip)
    earlier = torch.where(valid.unsqueeze(-1), turns, torch.zeros((), dtype=torch.float64))
    alpha = episode_reward_scale(raw, clipped, slope, s, p)
    out = episode_token_rewards(p, alpha, earlier, mask)
    assert torch.isfinite(out).all() and torch.isfinite(alpha).all()
    assert (out[~mask] == 0).all() and (out[~valid] == 0).all()
    size = (alpha.abs().unsqueeze(-1) * earlier.abs()).sum(-1) + p.abs()
    assert ((out.sum(-1) - p).abs() <= 1e-12 * size + 1e-300).all()
    if clip is not None:
        assert (p.abs() <= clip).all()
    shares = torch.where(mask, alpha.unsqueeze(-1) * earlier, torch.zeros((), dtype=torch.float64))
    last = mask.cumsum(-1) == mask.sum(-1, keepdim=True)
    assert torch.equal(out[mask & ~last], shares[mask & ~last])  # earlier turns: alpha * r_k exactly
