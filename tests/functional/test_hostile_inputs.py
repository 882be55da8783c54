"""Property tests on hostile inputs: no NaN or inf in any value or gradient.

Hypothesis chooses the structure (shapes, dtypes, magnitudes, mask lengths including all-masked
rows and single tokens, group sizes including one, equal rewards); a seed it also draws fills the
tensors. Every differentiable function is backpropagated through.

Magnitudes: logits +-1e4 and 1e-30, log-prob differences +-1e4, rewards +-1e6. fp16 cannot hold
1e6 (its maximum is 65504), so fp16 draws stop at 6e4; and a gradient that is itself larger than
65504 cannot be an fp16 tensor, so where a loss's gradient is unbounded by design (an unclipped
ratio of up to e^20 times the advantage) the fp16 gradient is checked with advantages and
log-ratios whose true gradient fits in fp16.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional import (
    ADVANTAGE_ESTIMATORS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    RunningMoments,
    aggregate_loss,
    compute_advantages,
    entropy_from_logits,
    kl_penalty,
    logprobs_and_entropy_from_logits,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
    normalize_rewards,
    value_loss,
)
from steadyrl.functional.kl import KL_ESTIMATORS

FAST = settings(max_examples=40)
DTYPES = st.sampled_from([torch.float32, torch.bfloat16, torch.float16])


def finite(*tensors):
    return all(bool(torch.isfinite(t).all()) for t in tensors)


@st.composite
def masks(draw, max_b=6, max_t=6):
    """Right-padded masks with lengths 0..T, hostile shapes favoured: all-masked rows, single tokens."""
    b = draw(st.integers(1, max_b))
    t = draw(st.integers(1, max_t))
    lengths = draw(st.lists(st.sampled_from([t, 1, 0, *range(t + 1)]), min_size=b, max_size=b))
    return torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def fill(seed, shape, scale, dtype, kind="normal"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if kind == "signs":  # only the extremes
        x = torch.sign(x) + (x == 0)
    x = x * scale
    limit = 6e4 if dtype == torch.float16 else None
    if limit is not None:
        x = x.clamp(-limit, limit)
    return x.to(dtype)


SEEDS = st.integers(0, 2**31 - 1)
LOGIT_SCALES = st.sampled_from([1e4, 1e-30, 1.0, 100.0])


# --- log-probs and entropy ------------------------------------------------------------------------


@FAST
@given(seed=SEEDS, dtype=DTYPES, scale=LOGIT_SCALES, kind=st.sampled_from(["normal", "signs"]),
       b=st.integers(1, 3), t=st.integers(1, 4), v=st.integers(2, 40),
       temperature=st.sampled_from([1.0, 0.3, 2.5]), chunk=st.sampled_from([None, 1, 3]))
def test_logprobs_and_entropy_are_finite_with_finite_gradients(seed, dtype, scale, kind, b, t, v, temperature, chunk):
    logits = fill(seed, (b, t, v), scale, dtype, kind).requires_grad_(True)
    g = torch.Generator().manual_seed(seed + 1)
    labels = torch.randint(0, v, (b, t), generator=g)
    labels[0, 0] = -100
    logp, ent = logprobs_and_entropy_from_logits(logits, labels, temperature, chunk_size=chunk)
    assert logp.dtype == ent.dtype == torch.float32
    assert finite(logp, ent)
    assert (logp <= 0).all() and logp[0, 0] == 0
    (logp.sum() + ent.sum()).backward()
    assert logits.grad.dtype == dtype and finite(logits.grad)
    # the gradient of a log-prob w.r.t. its logits sums to 0 over the vocabulary (up to rounding)
    logits.grad = None
    logprobs_from_logits(logits, labels, temperature, chunk_size=chunk).sum().backward()
    assert finite(logits.grad)
    assert logits.grad.float().sum(-1).abs().max() <= 1e-2 / temperature
    logits.grad = None
    entropy_from_logits(logits, temperature, chunk_size=chunk).sum().backward()
    assert finite(logits.grad)


@FAST
@given(seed=SEEDS, dtype=DTYPES, scale=LOGIT_SCALES, kind=st.sampled_from(["normal", "signs"]),
       v=st.integers(2, 40), temperature=st.sampled_from([1.0, 0.3, 2.5]))
def test_entropy_stays_within_zero_and_log_vocab_for_any_logits(seed, dtype, scale, kind, v, temperature):
    logits = fill(seed, (2, 3, v), scale, dtype, kind)
    ent = entropy_from_logits(logits, temperature)
    assert (ent >= -1e-3).all() and (ent <= math.log(v) + 1e-3).all(), ent


# --- KL -------------------------------------------------------------------------------------------


@FAST
@given(seed=SEEDS, dtype=DTYPES, scale=st.sampled_from([1e4, 50.0, 1.0, 1e-30]), kind=st.sampled_from(["normal", "signs"]),
       shape=st.tuples(st.integers(1, 4), st.integers(1, 6)))
def test_every_kl_estimator_is_finite_with_finite_gradients(seed, dtype, scale, kind, shape):
    lp = fill(seed, shape, scale, dtype, kind).requires_grad_(True)
    ref = fill(seed + 1, shape, scale, dtype, kind).requires_grad_(True)
    for name in KL_ESTIMATORS:
        lp.grad = ref.grad = None
        out = kl_penalty(lp, ref, name)
        assert out.dtype == torch.float32 and finite(out), name
        assert out.abs().max() <= 800.0  # k2 at the +-40 clamp; k1 and abs <= 40, k3 <= 10
        if name in ("k3", "low_var_kl"):
            assert (out >= 0).all() and (out <= 10).all()
        out.sum().backward()
        assert finite(lp.grad, ref.grad), name


# --- reductions and whitening ---------------------------------------------------------------------


@FAST
@given(mask=masks(), seed=SEEDS, dtype=st.sampled_from([torch.float64, torch.float32, torch.bfloat16, torch.float16]),
       scale=st.sampled_from([1e6, 123.456, 1.0, 1e-30]), equal=st.booleans(), shift_mean=st.booleans())
def test_masked_whiten_and_moments_are_finite_and_bounded(mask, seed, dtype, scale, equal, shift_mean):
    x = fill(seed, mask.shape, scale, dtype)
    if equal:
        x = torch.full_like(x, x.flatten()[0].item())
    x.requires_grad_(True)
    n = int(mask.sum())
    out = masked_whiten(x, mask, shift_mean=shift_mean)
    assert out.dtype == (torch.float64 if dtype == torch.float64 else torch.float32) and finite(out)
    assert out[~mask].eq(0).all()
    if shift_mean:
        # |x - mean| / std <= (n - 1) / sqrt(n) for the unbiased std, and the epsilon only shrinks it
        assert out.abs().max() <= max((n - 1) / math.sqrt(max(n, 1)), 0.0) * (1 + 1e-4) + 1e-4
        if equal or n <= 1:
            assert out.eq(0).all()
    out.sum().backward()
    assert finite(x.grad)
    m, v = masked_mean(x, mask), masked_var(x, mask)
    assert finite(m, v) and v >= 0
    if equal and n:
        assert v == 0 and m == x.flatten()[0].to(m.dtype)


@FAST
@given(mask=masks(), seed=SEEDS, dtype=DTYPES, scale=st.sampled_from([1e6, 1e3, 1.0]),
       mode=st.sampled_from(LOSS_AGG_MODES), weighted=st.booleans())
def test_aggregate_loss_is_finite_with_finite_gradients(mask, seed, dtype, scale, mode, weighted):
    loss = fill(seed, mask.shape, scale, dtype)
    loss = torch.where(mask, loss, torch.full_like(loss, float("nan"))).requires_grad_(True)
    sw = torch.rand(mask.shape[0], generator=torch.Generator().manual_seed(seed)) * 2 if weighted else None
    out = aggregate_loss(loss, mask, mode, sample_weights=sw)
    assert out.dtype == torch.float32 and finite(out)
    if not mask.any():
        assert out.item() == 0.0
    out.backward()
    assert finite(loss.grad) and loss.grad[~mask].eq(0).all()


# --- rewards and advantages -----------------------------------------------------------------------


@st.composite
def score_batches(draw):
    n = draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
    groups = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([torch.float64, torch.float32, torch.bfloat16, torch.float16]))
    scale = draw(st.sampled_from([1e6, 1.0, 1e-30, 0.0]))
    seed = draw(SEEDS)
    kind = draw(st.sampled_from(["normal", "binary", "equal"]))
    g = torch.Generator().manual_seed(seed)
    if kind == "binary":
        s = (torch.rand(groups * n, generator=g) < 0.5).double() * scale
    elif kind == "equal":  # every group has equal scores
        s = (torch.randn(groups, generator=g, dtype=torch.float64) * scale).repeat_interleave(n)
    else:
        s = torch.randn(groups * n, generator=g, dtype=torch.float64) * scale
    if dtype == torch.float16:
        s = s.clamp(-6e4, 6e4)
    t = draw(st.integers(1, 5))
    lengths = draw(st.lists(st.sampled_from([t, 1, 0]), min_size=groups * n, max_size=groups * n))
    mask = torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return s.to(dtype), mask, n, kind


@FAST
@given(batch=score_batches())
def test_every_outcome_estimator_is_finite_and_zero_for_groups_without_spread(batch):
    scores, mask, n, kind = batch
    for name, est in ADVANTAGE_ESTIMATORS.items():
        if est.uses != "scores":
            continue
        adv, ret = compute_advantages(name, mask, scores=scores, group_size=n)
        assert finite(adv, ret), name
        assert adv[~mask].eq(0).all(), name
        if n == 1 or kind == "equal":
            if name == "opo":
                # OPO's baseline sum(L s) / sum(L) divides by no std, so the rounding of the
                # weighted mean stays at rounding level instead of being amplified: bound it there
                bound = 1e-6 * scores.double().abs().max().item()
                assert adv.abs().max() <= bound, (name, adv.tolist())
            else:
                assert adv.eq(0).all(), (name, adv.tolist())
        if name == "grpo":
            assert adv.abs().max() <= (n - 1) / math.sqrt(n) + 1e-4
    for mean_type in ("batch", "group", "running", "none"):
        for std_type in ("batch", "group", "running", "none"):
            out = normalize_rewards(scores, n, mean_type, std_type, running=RunningMoments())
            assert finite(out), (mean_type, std_type)
    if n == 1 or kind == "equal":  # per sequence, whatever the token mask
        assert normalize_rewards(scores, n, "group", "group").eq(0).all()
        assert normalize_rewards(scores, n, "group", "none").eq(0).all()


@FAST
@given(mask=masks(), seed=SEEDS, dtype=st.sampled_from([torch.float64, torch.float32, torch.bfloat16]),
       scale=st.sampled_from([1e6, 1.0, 1e-30]), gamma=st.sampled_from([1.0, 0.99]))
def test_token_reward_estimators_are_finite(mask, seed, dtype, scale, gamma):
    rewards = fill(seed, mask.shape, scale, dtype)
    values = fill(seed + 1, mask.shape, scale, dtype)
    for name in ("gae", "reinforce_plus_plus"):
        adv, ret = compute_advantages(name, mask, token_rewards=rewards, values=values, gamma=gamma)
        assert finite(adv, ret), name
        assert adv[~mask].eq(0).all() and ret[~mask].eq(0).all()


# --- losses ---------------------------------------------------------------------------------------


@st.composite
def policy_batches(draw):
    mask = draw(masks())
    dtype = draw(DTYPES)
    seed = draw(SEEDS)
    diff_scale = draw(st.sampled_from([1e4, 30.0, 1.0, 1e-30]))
    adv_scale = draw(st.sampled_from([1e6, 1.0, 0.0]))
    if dtype == torch.float16:
        # keep the true gradient (|A| * ratio / tokens) representable in fp16
        diff_scale = min(diff_scale, 5.0)
        adv_scale = min(adv_scale, 10.0)
    g = torch.Generator().manual_seed(seed)
    ref = -torch.rand(mask.shape, generator=g, dtype=torch.float64) * 10
    lp = (ref + torch.randn(mask.shape, generator=g, dtype=torch.float64) * diff_scale).clamp(max=0)
    lp = lp.clamp(min=-6e4).to(dtype)
    adv = torch.randn(mask.shape, generator=g, dtype=torch.float64) * adv_scale
    return lp, ref.float(), adv.float(), mask


@FAST
@given(batch=policy_batches(), mode=st.sampled_from(LOSS_AGG_MODES), dual=st.sampled_from([None, 1.4, 3.0]))
def test_every_policy_loss_is_finite_with_finite_gradients(batch, mode, dual):
    lp, old, adv, mask = batch
    for name, fn in POLICY_LOSSES.items():
        x = lp.clone().requires_grad_(True)
        loss, metrics = fn(x, old, adv, mask, dual_clip=dual, loss_agg_mode=mode)
        assert loss.dtype == torch.float32 and finite(loss), name
        assert all(finite(v) and v.dtype == torch.float32 for v in metrics.values()), (name, metrics)
        assert 0 <= metrics["clipfrac"] <= 1 + 1e-6
        loss.backward()
        assert x.grad.dtype == lp.dtype and finite(x.grad), name
        assert x.grad[~mask].eq(0).all(), name


@FAST
@given(mask=masks(), seed=SEEDS, dtype=DTYPES, scale=st.sampled_from([1e6, 1.0, 1e-30]),
       clip=st.sampled_from([None, 0.2, 10.0]), mode=st.sampled_from(LOSS_AGG_MODES))
def test_value_loss_is_finite_with_finite_gradients(mask, seed, dtype, scale, clip, mode):
    if dtype == torch.float16:
        scale = min(scale, 1e4)  # the gradient V - R must fit in fp16 too
    values = fill(seed, mask.shape, scale, dtype).requires_grad_(True)
    old = fill(seed + 1, mask.shape, scale, torch.float32)
    returns = fill(seed + 2, mask.shape, scale, torch.float32)
    loss, metrics = value_loss(values, old, returns, mask, clip_range=clip, loss_agg_mode=mode)
    assert finite(loss) and all(finite(v) for v in metrics.values())
    loss.backward()
    assert finite(values.grad) and values.grad[~mask].eq(0).all()
