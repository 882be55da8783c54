"""One regression test per known defect of the anchor libraries (DESIGN.md, "Known defects of the
anchors"), each named after the defect, plus the padding and float64 defects found in steadyrl
itself while writing this suite."""

import math
import statistics

import pytest
import torch

from steadyrl.functional import (
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    AdaptiveKLController,
    RunningMoments,
    aggregate_loss,
    clip_fraction,
    compute_advantages,
    explained_variance,
    grpo_advantages,
    group_mean_std,
    kl_penalty,
    masked_mean,
    masked_var,
    masked_whiten,
    normalize_rewards,
    ppo_policy_loss,
    rloo_advantages,
    value_loss,
)
from steadyrl.functional.constants import K3_VALUE_CLAMP, NORM_EPS

NAN, INF = float("nan"), float("inf")


# --- token-mean aggregation whose numerator is not masked -----------------------------------------


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("pad", [NAN, INF, -INF, 1e30])
def test_token_mean_numerator_is_masked_even_if_padding_holds_nan(mode, pad):
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    values = torch.tensor([[1.0, 2.0, 3.0, pad], [4.0, pad, pad, pad], [pad, pad, pad, pad]])
    loss = values.clone().requires_grad_(True)
    out = aggregate_loss(loss, mask, mode)
    expected = {
        "token-mean": 10.0 / 4,
        "seq-mean-token-sum": (6.0 + 4.0) / 2,
        "seq-mean-token-mean": (2.0 + 4.0) / 2,
        "seq-mean-token-sum-norm": (6.0 + 4.0) / (2 * 4),
    }[mode]
    assert out.item() == pytest.approx(expected, rel=1e-6)
    out.backward()
    assert torch.isfinite(loss.grad).all()
    assert loss.grad[mask == 0].eq(0).all()


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
@pytest.mark.parametrize("pad", [NAN, INF, -INF])
def test_policy_loss_gradient_stays_finite_when_padding_holds_nan_or_inf(name, pad):
    """Padding log-probs of -inf happen for real (a pad label whose logit is masked to -inf); a
    NaN there must not reach the gradient, which flows on into the model."""
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
    lp = torch.tensor([[-1.0, -2.0, pad, -0.5], [-0.3, pad, -1.0, pad]], requires_grad=True)
    old = torch.tensor([[-1.1, -1.9, pad, 0.0], [-0.2, pad, pad, 1.0]])
    adv = torch.tensor([[1.0, -1.0, pad, pad], [0.5, pad, 2.0, pad]])
    loss, metrics = POLICY_LOSSES[name](lp, old, adv, mask)
    clean = POLICY_LOSSES[name](
        torch.where(mask.bool(), lp.detach(), -1.0), torch.where(mask.bool(), old, -1.0),
        torch.where(mask.bool(), adv, 0.0), mask)
    assert loss.item() == pytest.approx(clean[0].item(), rel=1e-6)
    for key, value in metrics.items():
        assert torch.isfinite(value), key
        assert value.item() == pytest.approx(clean[1][key].item(), rel=1e-6), key
    loss.backward()
    assert torch.isfinite(lp.grad).all(), lp.grad
    assert lp.grad[mask == 0].eq(0).all()


@pytest.mark.parametrize("clip", [None, 0.2])
@pytest.mark.parametrize("pad", [NAN, INF])
def test_value_loss_gradient_stays_finite_when_padding_holds_nan_or_inf(clip, pad):
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    values = torch.tensor([[0.5, 1.5, pad], [2.0, 0.0, pad]], requires_grad=True)
    old = torch.tensor([[0.4, 1.0, pad], [2.5, pad, 0.0]])
    returns = torch.tensor([[1.0, 1.0, pad], [1.0, pad, pad]])
    loss, metrics = value_loss(values, old, returns, mask, clip_range=clip)
    assert torch.isfinite(loss) and all(torch.isfinite(v) for v in metrics.values())
    loss.backward()
    assert torch.isfinite(values.grad).all(), values.grad
    assert values.grad[mask == 0].eq(0).all()


# --- running reward normalisation that looks up a literal key and crashes -------------------------


@pytest.mark.parametrize("mean_type,std_type", [("running", "running"), ("running", "group"), ("batch", "running")])
def test_running_normalisation_takes_a_running_moments_object_not_a_literal_key(mean_type, std_type):
    scores = torch.tensor([1.0, 0.0, 0.5, 0.25, 1.0, 0.0])
    with pytest.raises(ValueError, match="RunningMoments"):
        normalize_rewards(scores, 3, mean_type, std_type)
    running = RunningMoments()
    out = normalize_rewards(scores, 3, mean_type, std_type, running=running)
    assert torch.isfinite(out).all()
    assert running.count == pytest.approx(6.0)
    assert running.mean == pytest.approx(statistics.fmean(scores.tolist()))
    # a second batch is normalised with the statistics of both
    more = torch.tensor([3.0, 2.0, 4.0, 3.0, 2.0, 4.0])
    out2 = normalize_rewards(more, 3, "running", "running", running=running)
    everything = scores.tolist() + more.tolist()
    expected = [(x - statistics.fmean(everything)) / (statistics.stdev(everything) + NORM_EPS) for x in more.tolist()]
    assert out2.tolist() == pytest.approx(expected, rel=1e-6)


# --- clip fractions whose denominator includes padding ----------------------------------------------


def test_clip_fraction_denominator_excludes_padding():
    x = torch.tensor([[5.0, 0.0, 9.0, 9.0, 9.0], [0.0, 0.0, 0.0, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 0, 0, 0]])
    assert clip_fraction(x, -1.0, 1.0, mask).item() == pytest.approx(1 / 4)  # not 1/10, not 6/10

    # the PPO clip fractions too: padding tokens with wild ratios count neither up nor down
    lp = torch.tensor([[0.0, 0.0, 5.0, 5.0], [0.0, 0.0, -5.0, -5.0]])
    old = torch.tensor([[-0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    adv = torch.ones(2, 4)
    pmask = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0]])
    _, metrics = ppo_policy_loss(lp, old, adv, pmask)
    assert metrics["clipfrac_high"].item() == pytest.approx(1 / 4)
    assert metrics["clipfrac"].item() == pytest.approx(1 / 4)
    assert metrics["ratio_max"].item() == pytest.approx(math.exp(0.5), rel=1e-6)
    assert metrics["ratio_mean"].item() == pytest.approx((math.exp(0.5) + 3) / 4, rel=1e-6)

    values = torch.tensor([[0.0, 5.0, 9.0, 9.0]])
    _, vm = value_loss(values, torch.zeros(1, 4), torch.zeros(1, 4) + 10, torch.tensor([[1, 1, 0, 0]]), clip_range=0.5)
    assert vm["vf_clipfrac"].item() == pytest.approx(1 / 2)


# --- k3 clamped after exp, so an overflow still yields inf/NaN gradients ----------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("estimator", ["k3", "low_var_kl"])
def test_k3_is_clamped_before_exp_so_gradients_stay_finite(dtype, estimator):
    # exp(-d) overflows float32 for d < -88.7 and float16 for d < -11.1
    lp = torch.tensor([-1e4, -200.0, -90.0, -12.0, 0.0, 12.0, 90.0, 1e4]).to(dtype).requires_grad_(True)
    ref = torch.zeros(8, dtype=dtype, requires_grad=True)
    k3 = kl_penalty(lp, ref, estimator)
    assert torch.isfinite(k3).all()
    assert k3.tolist()[:4] == [K3_VALUE_CLAMP] * 4 and k3.tolist()[-3:] == [K3_VALUE_CLAMP] * 3
    assert k3[4].item() == 0.0
    k3.sum().backward()
    assert torch.isfinite(lp.grad).all() and torch.isfinite(ref.grad).all()
    assert lp.grad[:4].eq(0).all()  # clamped: no gradient, not inf * 0


# --- rewards kept in fp16 through normalisation ---------------------------------------------------


def test_fp16_rewards_are_normalised_in_float32():
    # fp16 tops out at 65504: the sum of these overflows, as do their squared deviations' sum
    raw = [60000.0, 65000.0, 62000.0, 64000.0, 100.0, 400.0, 100.0, 400.0]
    scores = torch.tensor(raw, dtype=torch.float16)
    assert torch.isinf(scores[:4].sum()) and torch.isinf((scores[:4] * 4).sum())  # what fp16 would do
    rounded = scores.double().tolist()
    for mean_type, std_type in [("group", "group"), ("batch", "batch"), ("batch", "group")]:
        out = normalize_rewards(scores, 4, mean_type, std_type)
        assert out.dtype == torch.float32 and torch.isfinite(out).all()
        for i, x in enumerate(rounded):
            grp = rounded[i // 4 * 4 : i // 4 * 4 + 4]
            mean = statistics.fmean(rounded if mean_type == "batch" else grp)
            std = statistics.stdev(rounded if std_type == "batch" else grp)
            assert out[i].item() == pytest.approx((x - mean) / (std + NORM_EPS), rel=1e-5)
    mean, std = group_mean_std(scores, 4)
    assert mean.dtype == torch.float32 and mean[0].item() == pytest.approx(statistics.fmean(rounded[:4]))
    adv = grpo_advantages(scores, torch.ones(8, 2), 4)
    assert adv.dtype == torch.float32 and torch.isfinite(adv).all()
    # precision, not only range: fp16 cannot hold 2049, the float32 mean of (2048, 2050) can
    pair = torch.tensor([2048.0, 2050.0, 2048.0, 2050.0], dtype=torch.float16)
    assert masked_mean(pair, torch.ones(4)).item() == 2049.0
    assert normalize_rewards(pair, 4, "group", "none").tolist() == [-1.0, 1.0, -1.0, 1.0]


# --- whitening with a single valid token ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("value", [5.0, -3.25, 1000.0])
def test_whitening_a_single_valid_token_gives_no_nan(dtype, value):
    x = torch.tensor([[value, NAN, INF], [7.0, 8.0, 9.0]], dtype=dtype, requires_grad=True)
    mask = torch.tensor([[1, 0, 0], [0, 0, 0]])
    out = masked_whiten(x, mask)
    assert torch.isfinite(out).all()
    assert out.eq(0).all()  # one value minus its own mean is exactly 0
    kept = masked_whiten(x, mask, shift_mean=False)
    assert kept[0, 0].item() == value and kept.flatten()[1:].eq(0).all()
    (out.sum() + kept.sum()).backward()
    assert torch.isfinite(x.grad).all()
    assert masked_var(x, mask).item() == 0.0


# --- a GRPO group of size 1 -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_grpo_group_of_one_gives_zero_advantage(dtype):
    scores = torch.tensor([1.0, 0.0, 0.37, -2.5, 6e4, 123.456]).to(dtype)
    if dtype != torch.float16:
        scores = torch.cat([scores, torch.tensor([1e6, -1e6], dtype=dtype)])
    mask = torch.ones(len(scores), 3)
    for norm_by_std in (True, False):
        adv = grpo_advantages(scores, mask, 1, norm_by_std=norm_by_std)
        assert adv.eq(0).all(), adv[:, 0].tolist()
    for name in ("rloo", "opo", "grpo_passk", "reinforce_plus_plus_baseline"):
        adv, _ = compute_advantages(name, mask, scores=scores, group_size=1)
        assert torch.isfinite(adv).all() and adv.eq(0).all(), name
    _, std = group_mean_std(scores, 1)
    assert std.eq(0).all()


# --- a group whose rewards are all equal ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [2, 3, 5, 7, 8])
def test_grpo_equal_rewards_give_zero_advantage(dtype, n):
    values = [0.0, 1.0, 0.1, 0.7, 123.456, -3.3, 6e4] + ([] if dtype == torch.float16 else [1e6, -1e6])
    scores = torch.tensor([v for v in values for _ in range(n)]).to(dtype)
    mask = torch.ones(len(scores), 4)
    for norm_by_std in (True, False):
        adv = grpo_advantages(scores, mask, n, norm_by_std=norm_by_std)
        assert adv.eq(0).all(), adv[:, 0].tolist()
    assert rloo_advantages(scores, mask, n).eq(0).all()
    for name in ("grpo_passk", "reinforce_plus_plus_baseline"):
        adv, _ = compute_advantages(name, mask, scores=scores, group_size=n)
        assert adv.eq(0).all(), name
    # the batch view as well: equal rewards across the batch normalise to 0, their variance is 0
    flat = torch.full((n * 2,), values[4] if dtype != torch.float16 else 0.7).to(dtype)
    assert normalize_rewards(flat, n, "batch", "batch").eq(0).all()
    assert masked_var(flat, torch.ones(n * 2)).item() == 0.0
    assert explained_variance(flat * 0.5, flat, torch.ones(n * 2)).item() == 0.0


# --- the adaptive KL controller updated more than once per step -----------------------------------


def test_adaptive_kl_controller_refuses_a_second_update_in_the_same_step():
    ctl = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    beta = ctl.update(12.0, 256, step=5)
    with pytest.raises(RuntimeError, match="step 5"):
        ctl.update(12.0, 256, step=5)
    with pytest.raises(RuntimeError):
        ctl.update(12.0, 256, step=4)  # nor an earlier step
    assert ctl.value == beta  # the refused calls changed nothing
    assert ctl.update(12.0, 256, step=6) > beta
    # the guard survives a checkpoint
    restored = AdaptiveKLController(1.0, target=1.0, horizon=1)
    restored.load_state_dict(ctl.state_dict())
    with pytest.raises(RuntimeError):
        restored.update(1.0, 1, step=6)
