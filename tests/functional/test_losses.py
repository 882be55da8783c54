"""Loss aggregation, every policy loss and the value loss: values, gradients and metrics against a
float64 oracle that works token by token on Python floats.

The oracle writes each loss as ``sum_{b,t} w_{b,t} * L_{b,t}``, where ``L`` is the per-token loss
and ``w`` the aggregation weight of the token (its share of the denominator), so the gradient of
the scalar with respect to a token's log-prob is ``w * dL/dlogp``, with ``dL/dlogp`` written out by
hand for the branch of the clip that is active.
"""

import math

import pytest
import torch

from steadyrl.functional import (
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    aggregate_loss,
    cispo_policy_loss,
    count_tokens_and_seqs,
    gspo_policy_loss,
    ppo_policy_loss,
    value_loss,
    vanilla_pg_loss,
)
from steadyrl.functional.constants import K3_VALUE_CLAMP, LOG_RATIO_CLAMP, LOGPROB_DIFF_CLAMP, MASK_EPS

from support import ALL_DTYPES, out_dtype

B, T = 6, 7
# float64 is held to 1e-10, except GSPO (1e-8): its sequence ratio is a masked mean, whose 1e-8
# denominator epsilon (seed 000) moves the log-ratio by ~1e-8 * spread / length.
VALUE_TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 5e-5, torch.float16: 5e-5}
GRAD_TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def mask_case(seed, b=B, t=T):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, t + 1, (b,), generator=g)
    lengths[0], lengths[1], lengths[-1] = 0, 1, t
    return torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)


def policy_case(seed, dtype=torch.float32, spread=0.3, b=B, t=T):
    """logprobs, old_logprobs (ratios around 1 +- spread), advantages of both signs, a mask, and
    garbage on padding. old_logprobs and advantages are float32 as a trainer would hold them."""
    g = torch.Generator().manual_seed(seed)
    mask = mask_case(seed, b, t)
    lp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    old = lp + torch.randn(b, t, generator=g, dtype=torch.float64) * spread
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    lp = torch.where(mask, lp, torch.full_like(lp, -1e4)).to(dtype)
    old = torch.where(mask, old, torch.full_like(old, 7.0)).to(dtype if dtype == torch.float64 else torch.float32)
    adv = torch.where(mask, adv, torch.full_like(adv, 1e4)).to(dtype if dtype == torch.float64 else torch.float32)
    return lp, old, adv, mask


def sample_weights_case(seed, b=B):
    g = torch.Generator().manual_seed(seed + 1000)
    return torch.rand(b, generator=g, dtype=torch.float64) * 1.5 + 0.5


# --- aggregation oracle ---------------------------------------------------------------------------


def agg_weights(mask, mode, global_tokens=None, global_seqs=None, norm_length=None, sample_weights=None):
    """Per-token weight w[b][t] of the aggregated scalar ``sum w * L``."""
    b_, t_ = mask.shape
    lengths = [sum(bool(mask[b, t]) for t in range(t_)) for b in range(b_)]
    n_tokens = sum(lengths) if global_tokens is None else global_tokens
    n_seqs = sum(1 for n in lengths if n > 0) if global_seqs is None else global_seqs
    length = t_ if norm_length is None else norm_length
    w = [[0.0] * t_ for _ in range(b_)]
    for b in range(b_):
        sw = 1.0 if sample_weights is None else float(sample_weights[b])
        for t in range(t_):
            if not mask[b, t]:
                continue
            if mode == "token-mean":
                w[b][t] = sw / (n_tokens + MASK_EPS)
            elif mode == "seq-mean-token-sum":
                w[b][t] = sw / (n_seqs + MASK_EPS)
            elif mode == "seq-mean-token-mean":
                w[b][t] = sw / ((lengths[b] + MASK_EPS) * (n_seqs + MASK_EPS))
            else:
                w[b][t] = sw / (n_seqs * length + MASK_EPS)
    return w


def weighted_sum(w, per_token):
    return math.fsum(w[b][t] * per_token[b][t] for b in range(len(w)) for t in range(len(w[0])) if w[b][t] != 0.0)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("extras", ["plain", "global", "weights"])
def test_aggregate_loss_matches_the_oracle_in_every_mode(mode, dtype, extras):
    g = torch.Generator().manual_seed(LOSS_AGG_MODES.index(mode))
    mask = mask_case(LOSS_AGG_MODES.index(mode))
    raw = torch.randn(B, T, generator=g, dtype=torch.float64) * 2
    raw = torch.where(mask, raw, torch.full_like(raw, 3e4)).to(dtype)
    kwargs = {}
    if extras == "global":
        kwargs = dict(global_tokens=57, global_seqs=11, norm_length=13)
    elif extras == "weights":
        kwargs = dict(sample_weights=sample_weights_case(1).to(dtype))
    w = agg_weights(mask, mode, **{k: (v.double() if torch.is_tensor(v) else v) for k, v in kwargs.items()})
    loss = raw.clone().requires_grad_(True)
    out = aggregate_loss(loss, mask, mode, **kwargs)
    assert out.dtype == out_dtype(dtype) and out.dim() == 0
    rounded = raw.double()
    expected = weighted_sum(w, [[float(rounded[b, t]) for t in range(T)] for b in range(B)])
    assert out.item() == pytest.approx(expected, rel=VALUE_TOL[dtype], abs=VALUE_TOL[dtype])
    out.backward()
    assert loss.grad.dtype == dtype
    torch.testing.assert_close(loss.grad.double(), torch.tensor(w, dtype=torch.float64),
                               rtol=GRAD_TOL[dtype], atol=GRAD_TOL[dtype] * 1e-2)


def test_aggregate_loss_default_norm_length_is_T_and_an_empty_batch_gives_zero():
    mask = mask_case(9)
    loss = torch.ones(B, T, dtype=torch.float64)
    seqs = int(mask.any(-1).sum())
    out = aggregate_loss(loss, mask, "seq-mean-token-sum-norm")
    assert out.item() == pytest.approx(int(mask.sum()) / (seqs * T), rel=1e-9)
    empty = torch.zeros_like(mask)
    for mode in LOSS_AGG_MODES:
        x = torch.randn(B, T, requires_grad=True)
        agg = aggregate_loss(x, empty, mode)
        assert agg.item() == 0.0
        agg.backward()
        assert x.grad.eq(0).all()


def test_count_tokens_and_seqs_counts_valid_tokens_and_non_empty_rows():
    mask = mask_case(12)
    tokens = sum(int(mask[b, t]) for b in range(B) for t in range(T))
    seqs = sum(1 for b in range(B) if any(mask[b].tolist()))
    assert count_tokens_and_seqs(mask) == (tokens, seqs)
    assert count_tokens_and_seqs(mask.float()) == (tokens, seqs)


# --- policy loss oracles --------------------------------------------------------------------------


def clamp(x, lo, hi):
    return min(max(x, lo), hi)


def ratio_and_slope(lp, old):
    lr = lp - old
    r = math.exp(clamp(lr, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return r, (r if -LOG_RATIO_CLAMP < lr < LOG_RATIO_CLAMP else 0.0)


def surrogate(r, dr, a, lo, hi, dual):
    """PPO per-token loss and its derivative w.r.t. the log-prob, and which clip is active."""
    unc, d_unc = -a * r, -a * dr
    clp = -a * clamp(r, lo, hi)
    d_clp = -a * dr if lo < r < hi else 0.0
    if unc > clp:
        loss, d = unc, d_unc
    elif clp > unc:
        loss, d = clp, d_clp
    else:
        loss, d = unc, 0.5 * (d_unc + d_clp)
    dual_active = False
    if dual is not None and a < 0:
        bound = -dual * a
        if loss > bound:
            loss, d, dual_active = bound, 0.0, True
        elif loss == bound:
            d = 0.5 * d
    return loss, d, {"low": r < lo and a < 0, "high": r > hi and a > 0, "dual": dual_active}


def k3(lp, old):
    d = clamp(lp - old, -LOGPROB_DIFF_CLAMP, LOGPROB_DIFF_CLAMP)
    return clamp(math.exp(-d) - 1.0 + d, -K3_VALUE_CLAMP, K3_VALUE_CLAMP)


def policy_oracle(name, lp, old, adv, mask, clip_low, clip_high, dual, agg):
    """(loss, dloss/dlp [B, T], metrics) of a registered policy loss, in float64."""
    b_, t_ = mask.shape
    per = [[0.0] * t_ for _ in range(b_)]
    dper = [[0.0] * t_ for _ in range(b_)]
    counts = {"low": 0, "high": 0, "dual": 0}
    ratios, kls = [], []
    for b in range(b_):
        valid = [t for t in range(t_) if mask[b, t]]
        if name == "gspo" and valid:
            seq_lr = math.fsum(clamp(float(lp[b, t]) - float(old[b, t]), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
                               for t in valid) / len(valid)
            seq_r = math.exp(seq_lr)
        for t in valid:
            p, o, a = float(lp[b, t]), float(old[b, t]), float(adv[b, t])
            r, dr = ratio_and_slope(p, o)
            kls.append(k3(p, o))
            if name in ("ppo", "gspo"):
                if name == "gspo":
                    r, dr = seq_r, seq_r
                per[b][t], dper[b][t], active = surrogate(r, dr, a, 1 - clip_low, 1 + clip_high, dual)
                for k in counts:
                    counts[k] += active[k]
            elif name == "cispo":
                wgt = clamp(r, 1 - clip_low, 1 + clip_high)
                per[b][t], dper[b][t] = -wgt * a * p, -wgt * a
                counts["low"] += r < 1 - clip_low
                counts["high"] += r > 1 + clip_high
            else:
                per[b][t], dper[b][t] = -a * r, -a * dr
            ratios.append(r)
    w = agg_weights(mask, **agg)
    loss = weighted_sum(w, per)
    grad = [[w[b][t] * dper[b][t] for t in range(t_)] for b in range(b_)]
    n = len(ratios) + MASK_EPS
    metrics = {
        "clipfrac_low": counts["low"] / n,
        "clipfrac_high": counts["high"] / n,
        "clipfrac": (counts["low"] + counts["high"]) / n,
        "clipfrac_dual": counts["dual"] / n,
        "ratio_mean": math.fsum(ratios) / n,
        "ratio_max": max(ratios) if ratios else 0.0,
        "ratio_min": min(ratios) if ratios else 0.0,
        "approx_kl": math.fsum(kls) / n,
    }
    return loss, torch.tensor(grad, dtype=torch.float64), metrics


LOSS_FNS = {"ppo": ppo_policy_loss, "gspo": gspo_policy_loss, "cispo": cispo_policy_loss, "vanilla_pg": vanilla_pg_loss}
DEFAULTS = {  # clip_low, clip_high, default aggregation of each loss
    "ppo": (0.2, 0.2, "token-mean"),
    "gspo": (3e-4, 4e-4, "seq-mean-token-mean"),
    "cispo": (1.0, 0.28, "token-mean"),
    "vanilla_pg": (0.2, 0.2, "token-mean"),
}
CONFIGS = [
    # name, clip_low, clip_high, dual_clip, spread of the log-ratios
    ("ppo", 0.2, 0.2, None, 0.3),
    ("ppo", 0.1, 0.28, None, 0.3),        # asymmetric
    ("ppo", 0.2, 0.2, 1.4, 0.6),          # dual clip (seed 003: 1 + 2 * 0.2)
    ("ppo", 0.15, 0.3, 2.0, 1.0),
    ("gspo", 3e-4, 4e-4, None, 0.3),
    ("gspo", 0.05, 0.08, 1.5, 1.5),
    ("cispo", 1.0, 0.28, None, 0.3),
    ("cispo", 0.2, 0.2, None, 0.5),
    ("vanilla_pg", 0.2, 0.2, None, 0.3),
]


@pytest.mark.parametrize("name,clip_low,clip_high,dual,spread", CONFIGS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_policy_loss_values_gradients_and_metrics_match_the_oracle(name, clip_low, clip_high, dual, spread, dtype):
    seed = CONFIGS.index((name, clip_low, clip_high, dual, spread))
    lp, old, adv, mask = policy_case(seed, dtype, spread)
    mode = DEFAULTS[name][2]
    x = lp.clone().requires_grad_(True)
    loss, metrics = LOSS_FNS[name](x, old, adv, mask, clip_low=clip_low, clip_high=clip_high, dual_clip=dual)
    exp_loss, exp_grad, exp_metrics = policy_oracle(
        name, lp.double(), old.double(), adv.double(), mask, clip_low, clip_high, dual, dict(mode=mode))
    vt, gt = VALUE_TOL[dtype], GRAD_TOL[dtype]
    if name == "gspo" and dtype == torch.float64:
        vt = gt = 1e-8
    assert loss.dtype == out_dtype(dtype) and loss.dim() == 0
    assert loss.item() == pytest.approx(exp_loss, rel=vt, abs=vt)
    loss.backward()
    assert x.grad.dtype == dtype
    torch.testing.assert_close(x.grad.double(), exp_grad, rtol=gt, atol=gt * 1e-2)
    assert set(exp_metrics) <= set(metrics)
    for key, expected in exp_metrics.items():
        value = metrics[key]
        assert not value.requires_grad and value.dim() == 0
        assert value.item() == pytest.approx(expected, rel=1e-5, abs=1e-6), key
    # the oracle's clip counts are not all zero for the configurations that clip
    if name in ("ppo", "gspo"):
        assert exp_metrics["clipfrac"] > 0
    if dual is not None:
        assert exp_metrics["clipfrac_dual"] > 0


@pytest.mark.parametrize("name", sorted(LOSS_FNS))
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_policy_losses_aggregate_with_every_mode_and_global_counts(name, mode):
    lp, old, adv, mask = policy_case(77, torch.float64, 0.4)
    cl, ch, _ = DEFAULTS[name]
    sw = sample_weights_case(3)
    agg = dict(global_tokens=40, global_seqs=9, norm_length=11, sample_weights=sw)
    x = lp.clone().requires_grad_(True)
    loss, _ = LOSS_FNS[name](x, old, adv, mask, loss_agg_mode=mode, **agg)
    exp_loss, exp_grad, _ = policy_oracle(name, lp, old, adv, mask, cl, ch, None, dict(mode=mode, **agg))
    tol = 1e-8 if name == "gspo" else 1e-10
    assert loss.item() == pytest.approx(exp_loss, rel=tol, abs=tol * 1e-2)
    loss.backward()
    torch.testing.assert_close(x.grad, exp_grad, rtol=tol, atol=tol * 1e-2)


def test_policy_losses_are_registered_under_their_names():
    for name, fn in LOSS_FNS.items():
        assert POLICY_LOSSES[name] is fn


def test_ppo_log_ratio_is_clamped_to_20_before_exp():
    lp = torch.tensor([[0.0, -50.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-30.0, 0.0, -0.1]])
    adv = torch.tensor([[-1.0, 1.0, 1.0]])
    mask = torch.ones(1, 3)
    loss, m = ppo_policy_loss(lp, old, adv, mask)
    assert m["ratio_max"].item() == pytest.approx(math.exp(20.0), rel=1e-6)
    assert m["ratio_min"].item() == pytest.approx(math.exp(-20.0), rel=1e-5)
    loss.backward()
    assert torch.isfinite(lp.grad).all()
    assert lp.grad[0, 0].item() == 0.0 and lp.grad[0, 1].item() == 0.0  # clamped: no gradient


def test_vanilla_pg_on_policy_gradient_is_reinforce():
    lp, _, adv, mask = policy_case(5, torch.float64)
    x = lp.clone().requires_grad_(True)
    loss, m = vanilla_pg_loss(x, lp.detach(), adv, mask)
    n = int(mask.sum())
    assert loss.item() == pytest.approx(-sum(float(adv[b, t]) for b in range(B) for t in range(T) if mask[b, t]) / n)
    loss.backward()
    torch.testing.assert_close(x.grad, torch.where(mask, -adv / n, torch.zeros_like(adv)), rtol=1e-7, atol=1e-12)
    assert m["ratio_mean"].item() == pytest.approx(1.0) and m["approx_kl"].item() == 0.0


def test_policy_losses_do_not_mutate_inputs():
    lp, old, adv, mask = policy_case(6)
    before = [t.clone() for t in (lp, old, adv, mask)]
    for fn in LOSS_FNS.values():
        fn(lp.clone().requires_grad_(True), old, adv, mask)[0].backward()
    assert all(torch.equal(a, b) for a, b in zip(before, (lp, old, adv, mask)))


# --- value loss -----------------------------------------------------------------------------------


def value_oracle(v, old, ret, mask, clip, agg):
    b_, t_ = mask.shape
    per = [[0.0] * t_ for _ in range(b_)]
    dper = [[0.0] * t_ for _ in range(b_)]
    clipped_count, vals = 0, []
    for b in range(b_):
        for t in range(t_):
            if not mask[b, t]:
                continue
            x, o, r = float(v[b, t]), float(old[b, t]), float(ret[b, t])
            vals.append(x)
            sq, d_sq = (x - r) ** 2, 2 * (x - r)
            if clip is None:
                per[b][t], dper[b][t] = 0.5 * sq, 0.5 * d_sq
                continue
            vc = x if -clip <= x - o <= clip else o + clamp(x - o, -clip, clip)  # exact inside
            sq_c = (vc - r) ** 2
            d_c = 2 * (vc - r) * (1.0 if -clip < x - o < clip else 0.0)
            clipped_count += sq_c > sq
            if sq > sq_c:
                per[b][t], dper[b][t] = 0.5 * sq, 0.5 * d_sq
            elif sq_c > sq:
                per[b][t], dper[b][t] = 0.5 * sq_c, 0.5 * d_c
            else:
                per[b][t], dper[b][t] = 0.5 * sq, 0.25 * (d_sq + d_c)
    w = agg_weights(mask, **agg)
    n = len(vals) + MASK_EPS
    metrics = {"vf_clipfrac": clipped_count / n, "vpred_mean": math.fsum(vals) / n}
    return weighted_sum(w, per), [[w[b][t] * dper[b][t] for t in range(t_)] for b in range(b_)], metrics


@pytest.mark.parametrize("clip", [None, 0.2, 1.0])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_value_loss_matches_the_oracle_with_and_without_clipping(clip, dtype, mode):
    g = torch.Generator().manual_seed(31)
    mask = mask_case(31)
    old = torch.randn(B, T, generator=g, dtype=torch.float64)
    v = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.5
    ret = torch.randn(B, T, generator=g, dtype=torch.float64) * 2
    v = torch.where(mask, v, torch.full_like(v, 5e3)).to(dtype)
    x = v.clone().requires_grad_(True)
    loss, metrics = value_loss(x, old, ret, mask, clip_range=clip, loss_agg_mode=mode)
    exp_loss, exp_grad, exp_metrics = value_oracle(v.double(), old, ret, mask, clip, dict(mode=mode))
    assert loss.dtype == out_dtype(dtype)
    assert loss.item() == pytest.approx(exp_loss, rel=VALUE_TOL[dtype], abs=VALUE_TOL[dtype])
    loss.backward()
    assert x.grad.dtype == dtype
    torch.testing.assert_close(x.grad.double(), torch.tensor(exp_grad, dtype=torch.float64),
                               rtol=GRAD_TOL[dtype], atol=GRAD_TOL[dtype] * 1e-2)
    for key, expected in exp_metrics.items():
        assert metrics[key].item() == pytest.approx(expected, rel=1e-5, abs=1e-6), key
    if clip == 0.2:
        assert exp_metrics["vf_clipfrac"] > 0


@pytest.mark.parametrize("name", sorted(LOSS_FNS))
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_an_all_masked_batch_gives_zero_loss_zero_gradient_and_zero_metrics(name, mode):
    lp, old, adv, _ = policy_case(8)
    empty = torch.zeros(B, T, dtype=torch.bool)
    x = lp.clone().requires_grad_(True)
    loss, metrics = LOSS_FNS[name](x, old, adv, empty, loss_agg_mode=mode)
    assert loss.item() == 0.0
    loss.backward()
    assert x.grad.eq(0).all()
    assert all(v.item() == 0.0 for v in metrics.values()), metrics
    v = torch.randn(B, T, requires_grad=True)
    vloss, vmetrics = value_loss(v, old, adv, empty, clip_range=0.2, loss_agg_mode=mode)
    vloss.backward()
    assert vloss.item() == 0.0 and v.grad.eq(0).all() and all(m.item() == 0.0 for m in vmetrics.values())


def test_beyond_the_log_ratio_clamp_a_negative_advantage_takes_the_unclipped_branch_bounded_by_the_clamp():
    """What LOG_RATIO_CLAMP's docstring says: with A < 0, r far above 1 + clip_high and no dual
    clip, PPO's max(-rA, -clip(r)A) is the unclipped -rA; the clamp bounds it at -e^20 A, with
    zero gradient. With A > 0 the clipped branch is active: zero gradient, loss -(1 + eps) A."""
    from steadyrl.functional.constants import LOG_RATIO_CLAMP

    old = torch.zeros(1, 2, dtype=torch.float64)
    logprobs = torch.tensor([[30.0, 30.0]], dtype=torch.float64, requires_grad=True)  # log r = 30 > 20
    mask = torch.ones(1, 2)
    for adv, expected in ((-1.0, math.exp(LOG_RATIO_CLAMP)), (1.0, -1.2)):
        advantages = torch.full((1, 2), adv, dtype=torch.float64)
        loss, _ = ppo_policy_loss(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2)
        (grad,) = torch.autograd.grad(loss, logprobs)
        assert float(loss) == pytest.approx(expected, rel=1e-6)  # computed in float32
        assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("epsilon_high", [1.28, 5.0])
def test_trls_cispo_epsilon_high_is_pg_clip_high_plus_one(epsilon_high):
    """docs/migrating.md: TRL's cispo caps the weight at epsilon_high itself (``clamp(r,
    max=epsilon_high)``), steadyrl's at 1 + pg_clip_high: the same loss and gradient with
    pg_clip_high = epsilon_high - 1."""
    g = torch.Generator().manual_seed(0)
    old = torch.randn(4, 6, generator=g, dtype=torch.float64)
    logprobs = (old + 2 * torch.randn(4, 6, generator=g, dtype=torch.float64)).requires_grad_(True)
    advantages = torch.randn(4, 1, generator=g, dtype=torch.float64).expand(4, 6)
    mask = torch.ones(4, 6)
    trl_weight = torch.exp(logprobs - old).clamp(max=epsilon_high).detach()
    trl_loss = (-trl_weight * advantages * logprobs).mean()  # TRL's token-mean with a full mask
    ours, _ = cispo_policy_loss(logprobs, old, advantages, mask, clip_low=1.0, clip_high=epsilon_high - 1)
    assert float(ours) == pytest.approx(float(trl_loss), rel=1e-6)  # reductions in float32
    (g_ours,) = torch.autograd.grad(ours, logprobs)
    (g_trl,) = torch.autograd.grad(trl_loss, logprobs)
    assert torch.allclose(g_ours, g_trl, rtol=1e-5, atol=1e-9)
