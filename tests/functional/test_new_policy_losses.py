"""SAPO, KL-Cov and Clip-Cov against float64 oracles written from their papers' formulas, and their
token selections (entropy quantile, covariance top-k, random draw) against plain Python.

SAPO (arXiv 2511.20347): ``L_t = -(4 / tau) sigmoid(tau (r_t - 1)) A_t``, ``tau`` by the sign of A.
KL-Cov (arXiv 2505.22617): ``L_t = -A_t r_t + coef |log r_t| [t in top-k cov]``.
Clip-Cov (same paper): PPO's clipped loss with the drawn tokens' terms set to 0, denominators kept.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional import (
    POLICY_LOSS_OPTIONS,
    POLICY_LOSS_SELECTIONS,
    POLICY_LOSSES,
    clip_cov_candidates,
    high_entropy_mask,
    kl_cov_select,
    masked_quantile,
    ppo_policy_loss,
    random_subset,
    token_covariance,
    top_count,
    top_count_threshold,
)
from steadyrl.functional.constants import LOG_RATIO_CLAMP


def case(seed, b=5, t=7, spread=0.5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, t + 1, (b,), generator=g)
    lengths[0], lengths[1] = t, 1
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    lp = old + torch.randn(b, t, generator=g, dtype=torch.float64) * spread
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    return lp.to(dtype), old.to(dtype), adv.to(dtype), mask


def token_mean(per, mask):
    n = int(mask.sum())
    return math.fsum(per[b][t] for b in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[b, t]) / (n + 1e-8)


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


@pytest.mark.parametrize("tau_pos,tau_neg", [(1.0, 1.05), (0.5, 2.0), (4.0, 4.0)])
@pytest.mark.parametrize("spread", [0.05, 0.8])
def test_sapo_value_and_gradient_match_the_float64_oracle(tau_pos, tau_neg, spread):
    lp, old, adv, mask = case(int(tau_pos * 10 + spread * 100), spread=spread)
    b_, t_ = mask.shape
    per = [[0.0] * t_ for _ in range(b_)]
    grad = torch.zeros(b_, t_, dtype=torch.float64)
    n = int(mask.sum())
    for b in range(b_):
        for t in range(t_):
            if not mask[b, t]:
                continue
            a = float(adv[b, t])
            r = math.exp(max(min(float(lp[b, t] - old[b, t]), LOG_RATIO_CLAMP), -LOG_RATIO_CLAMP))
            tau = tau_pos if a > 0 else tau_neg
            s = sigmoid(tau * (r - 1.0))
            per[b][t] = -(4.0 / tau) * s * a
            grad[b, t] = -4.0 * s * (1.0 - s) * r * a / (n + 1e-8)  # d/dlp, r = exp(lp - old)
    x = lp.clone().requires_grad_(True)
    loss, metrics = POLICY_LOSSES["sapo"](x, old, adv, mask, sapo_tau_pos=tau_pos, sapo_tau_neg=tau_neg)
    loss.backward()
    assert loss.item() == pytest.approx(token_mean(per, mask), rel=1e-12, abs=1e-14)
    torch.testing.assert_close(x.grad, grad, rtol=1e-10, atol=1e-14)
    assert 0 < float(metrics["gate_mean"]) <= 1.0


def test_sapo_on_policy_gradient_is_the_policy_gradient():
    """At r = 1 the gate's slope is 4 sigma(0)(1 - sigma(0)) = 1: SAPO's gradient is -A / N."""
    _, old, adv, mask = case(3)
    x = old.clone().requires_grad_(True)
    loss, metrics = POLICY_LOSSES["sapo"](x, old, adv, mask)
    loss.backward()
    expected = torch.where(mask, -adv / (mask.sum() + 1e-8), torch.zeros((), dtype=torch.float64))
    torch.testing.assert_close(x.grad, expected, rtol=1e-8, atol=1e-14)
    assert float(metrics["gate_mean"]) == pytest.approx(1.0)


def test_sapo_damps_an_off_policy_token_smoothly_where_ppo_cuts_it():
    old = torch.zeros(1, 3, dtype=torch.float64)
    lp = torch.tensor([[0.0, math.log(1.25), math.log(10.0)]], dtype=torch.float64)
    adv = torch.ones(1, 3, dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    grads = {}
    for name in ("ppo", "sapo"):
        x = lp.clone().requires_grad_(True)
        POLICY_LOSSES[name](x, old, adv, mask)[0].backward()
        grads[name] = x.grad[0].abs() / x.grad[0, 0].abs()  # relative to the on-policy token
    assert grads["ppo"][1] == 0 and grads["ppo"][2] == 0  # outside the band: cut
    assert grads["sapo"][1] > 0.9  # just outside PPO's band: SAPO still learns from it
    assert 0 < grads["sapo"][2] < 0.01  # far off-policy: faded out, smoothly


def test_kl_cov_selects_the_top_covariance_tokens_and_penalises_only_them():
    lp, old, adv, mask = case(5, b=6, t=9)
    ratio, coef = 0.1, 0.7
    valid = [(b, t) for b in range(6) for t in range(9) if mask[b, t]]
    am = math.fsum(float(adv[i]) for i in valid) / len(valid)
    lm = math.fsum(float(lp[i]) for i in valid) / len(valid)
    cov = {i: (float(adv[i]) - am) * (float(lp[i]) - lm) for i in valid}
    k = max(1, int(ratio * len(valid)))
    top = set(sorted(valid, key=lambda i: cov[i], reverse=True)[:k])
    per = [[0.0] * 9 for _ in range(6)]
    grad = torch.zeros(6, 9, dtype=torch.float64)
    n = len(valid)
    for (b, t) in valid:
        d = float(lp[b, t] - old[b, t])
        r, a = math.exp(d), float(adv[b, t])
        per[b][t] = -a * r + (coef * abs(d) if (b, t) in top else 0.0)
        grad[b, t] = (-a * r + (coef * math.copysign(1.0, d) if (b, t) in top else 0.0)) / (n + 1e-8)
    x = lp.clone().requires_grad_(True)
    loss, metrics = POLICY_LOSSES["kl_cov"](x, old, adv, mask, kl_cov_ratio=ratio, kl_cov_coef=coef)
    loss.backward()
    assert loss.item() == pytest.approx(token_mean(per, mask), rel=1e-12)
    torch.testing.assert_close(x.grad, grad, rtol=1e-10, atol=1e-14)
    assert float(metrics["cov_selected_frac"]) == pytest.approx(k / n)
    selected = kl_cov_select(token_covariance(adv, lp, mask), mask, ratio)
    assert {tuple(i) for i in selected.nonzero().tolist()} == top


def test_clip_cov_with_a_given_selection_is_ppo_with_those_tokens_dropped_from_the_numerator():
    lp, old, adv, mask = case(8, spread=0.05)  # near-policy: PPO's clip cuts no token
    selected = torch.zeros_like(mask)
    selected[0, 0] = selected[0, 3] = selected[1, 0] = True
    loss, metrics = POLICY_LOSSES["clip_cov"](lp, old, adv, mask, selected=selected)
    kept = torch.where(selected, torch.zeros((), dtype=torch.float64), torch.ones((), dtype=torch.float64))
    expected, _ = ppo_policy_loss(lp, old, adv, mask, token_weights=kept)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    full, _ = ppo_policy_loss(lp, old, adv, mask)
    assert loss.item() != pytest.approx(full.item())
    assert float(metrics["cov_selected_frac"]) == pytest.approx(3 / int(mask.sum()))


def test_clip_cov_never_draws_a_token_ppo_already_clips_and_draws_its_count_otherwise():
    lp, old, adv, mask = case(9, b=8, t=10, spread=0.6)
    free = mask & ~(-adv * torch.exp(lp - old).clamp(0.8, 1.2) > -adv * torch.exp(lp - old))
    g = torch.Generator().manual_seed(0)
    _, metrics = POLICY_LOSSES["clip_cov"](lp, old, adv, mask, clip_cov_ratio=0.1, clip_cov_lb=-1e9,
                                           clip_cov_ub=1e9, generator=g)
    drawn = round(float(metrics["cov_selected_frac"]) * int(mask.sum()))
    assert drawn == min(top_count(int(mask.sum()), 0.1), int(free.sum()))
    everything = torch.ones_like(mask)
    _, m2 = POLICY_LOSSES["clip_cov"](lp, old, adv, mask, selected=everything)
    assert round(float(m2["cov_selected_frac"]) * int(mask.sum())) == int(free.sum())


def test_masked_quantile_matches_torch_quantile_on_the_valid_values():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 11, generator=g, dtype=torch.float64)
    mask = torch.rand(7, 11, generator=g) < 0.6
    for q in (0.0, 0.2, 0.5, 0.8, 1.0):
        assert masked_quantile(x, mask, q).item() == pytest.approx(torch.quantile(x[mask], q).item(), rel=1e-12)
    assert masked_quantile(x, torch.zeros_like(mask), 0.5).item() == math.inf


@pytest.mark.parametrize("rho", [1.0, 0.5, 0.2, 0.01])
def test_high_entropy_mask_keeps_the_top_fraction_of_valid_tokens(rho):
    g = torch.Generator().manual_seed(2)
    entropy = torch.rand(10, 20, generator=g, dtype=torch.float64)
    mask = torch.rand(10, 20, generator=g) < 0.7
    entropy[~mask] = 1e9  # padding never counts, whatever it holds
    kept = high_entropy_mask(entropy, mask, rho)
    assert not (kept & ~mask).any()
    n = int(mask.sum())
    assert abs(int(kept.sum()) - rho * n) <= 1 + (rho < 1)
    if rho < 1:
        assert entropy[kept].min() >= entropy[mask & ~kept].max()


def test_selections_of_an_empty_mask_select_nothing_and_a_threshold_from_outside_is_used():
    x = torch.randn(3, 4)
    empty = torch.zeros(3, 4, dtype=torch.bool)
    assert not high_entropy_mask(x, empty, 0.2).any()
    assert not kl_cov_select(x, empty, 0.5).any()
    assert top_count(0, 0.5) == 0 and top_count(10, 0.01) == 1 and top_count(10, 0.35) == 3
    assert not random_subset(clip_cov_candidates(x, empty, -9, 9), 3, torch.rand(3, 4)).any()
    full = torch.ones(3, 4, dtype=torch.bool)
    assert int(high_entropy_mask(x, full, 0.5, threshold=float("inf")).sum()) == 0
    assert int(kl_cov_select(x, full, 0.5, threshold=float("-inf")).sum()) == 12


def test_random_subset_draws_exactly_count_and_every_candidate_can_be_drawn():
    candidates = torch.zeros(4, 5, dtype=torch.bool)
    candidates[0, :3] = candidates[2, 1:] = True
    seen = torch.zeros(4, 5, dtype=torch.bool)
    for seed in range(60):
        keys = torch.rand(4, 5, generator=torch.Generator().manual_seed(seed))
        drawn = random_subset(candidates, 2, keys)
        assert int(drawn.sum()) == 2 and not (drawn & ~candidates).any()
        seen |= drawn
    assert torch.equal(seen, candidates)
    assert torch.equal(random_subset(candidates, 99, torch.rand(4, 5)), candidates)


def test_bad_selection_arguments_are_refused_with_the_name_and_value():
    x = torch.zeros(2, 2)
    m = torch.ones(2, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="top_quantile must be in"):
        high_entropy_mask(x, m, 0.0)
    with pytest.raises(ValueError, match="ratio must be in"):
        top_count(5, 1.5)
    with pytest.raises(ValueError, match="clip_cov_lb"):
        clip_cov_candidates(x, m, 2.0, 1.0)
    with pytest.raises(ValueError, match="sapo_tau_pos"):
        POLICY_LOSSES["sapo"](x, x, x, m, sapo_tau_pos=0.0)


def test_each_new_loss_declares_its_options_and_selection():
    assert POLICY_LOSS_OPTIONS["sapo"] == ("sapo_tau_pos", "sapo_tau_neg")
    assert POLICY_LOSS_OPTIONS["kl_cov"] == ("kl_cov_ratio", "kl_cov_coef")
    assert POLICY_LOSS_OPTIONS["clip_cov"] == ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")
    assert POLICY_LOSS_OPTIONS["ppo"] == ()
    assert POLICY_LOSS_SELECTIONS == {"kl_cov": "kl_cov", "clip_cov": "clip_cov"}


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([1e-30, 1.0, 50.0, 1e4]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
       name=st.sampled_from(["sapo", "kl_cov", "clip_cov"]), rows=st.integers(1, 4), cols=st.integers(1, 6),
       empty=st.booleans())
def test_new_losses_are_finite_in_value_and_gradient_on_hostile_inputs(seed, scale, dtype, name, rows, cols, empty):
    g = torch.Generator().manual_seed(seed)
    old = (torch.randn(rows, cols, generator=g) * scale).to(dtype)
    lp = (torch.randn(rows, cols, generator=g) * scale).to(dtype)
    if dtype == torch.float16:  # a gradient above 65504 is no fp16 tensor, and kl_cov's -A r is unclipped
        # by design (as vanilla_pg's, see test_hostile_inputs): keep the true log-ratios within 8 after rounding
        lp = (old.float() + (lp.float() - old.float()).clamp(-8, 8)).to(dtype)
        lp = torch.where((lp.float() - old.float()).abs() <= 8, lp, old)
    lp = lp.requires_grad_(True)
    adv = torch.randn(rows, cols, generator=g).clamp(-10, 10).to(dtype)
    mask = torch.zeros(rows, cols, dtype=torch.bool) if empty else torch.rand(rows, cols, generator=g) < 0.7
    old = torch.where(mask, old, torch.full_like(old, float("nan")))  # padding holds garbage
    loss, metrics = POLICY_LOSSES[name](lp, old, adv, mask, generator=g) if name == "clip_cov" else \
        POLICY_LOSSES[name](lp, old, adv, mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert all(torch.isfinite(v) for v in metrics.values())
    if empty:
        assert loss.item() == 0 and (lp.grad == 0).all()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([1e-30, 1.0, 1e4, 6e4]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.float64]),
       rho=st.sampled_from([1.0, 0.5, 0.2, 1e-3]), ratio=st.sampled_from([1e-4, 0.1, 1.0]))
def test_selections_are_finite_and_inside_the_mask_on_hostile_inputs(seed, scale, dtype, rho, ratio):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(4, 6, generator=g) * scale).to(dtype)
    adv = (torch.randn(4, 6, generator=g) * scale).to(dtype)
    x[0, 0] = float("nan")
    mask = torch.rand(4, 6, generator=g) < 0.6
    cov = token_covariance(adv, x, mask)
    assert torch.isfinite(cov).all()
    for chosen in (high_entropy_mask(x, mask, rho), kl_cov_select(cov, mask, ratio),
                   random_subset(clip_cov_candidates(cov, mask, -1.0, 1.0), 3, torch.rand(4, 6, generator=g))):
        assert not (chosen & ~mask).any()
    assert math.isfinite(float(top_count_threshold(cov, mask, 1))) == bool(mask.any())
