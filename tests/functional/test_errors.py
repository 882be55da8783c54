"""Bad arguments raise ValueError whose message names the argument, the value given and what
would be valid."""

import pytest
import torch

from steadyrl.functional import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGG_MODES,
    NORM_TYPES,
    AdaptiveKLController,
    FixedKLController,
    aggregate_loss,
    clip_rewards,
    compute_advantages,
    difficulty_mask,
    difficulty_weights,
    entropy_from_logits,
    grpo_advantages,
    kl_penalty,
    logprobs_from_logits,
    normalize_rewards,
    ppo_policy_loss,
    value_loss,
)

MASK = torch.ones(6, 3)
SCORES = torch.arange(6.0)


def message(excinfo):
    return str(excinfo.value)


def test_unknown_advantage_estimator_lists_the_registered_ones():
    with pytest.raises(ValueError) as e:
        compute_advantages("grpoo", MASK, scores=SCORES, group_size=3)
    msg = message(e)
    assert "advantage estimator" in msg and "'grpoo'" in msg
    assert all(name in msg for name in ADVANTAGE_ESTIMATORS)


def test_advantage_estimator_missing_its_input_says_which():
    with pytest.raises(ValueError, match="needs scores"):
        compute_advantages("grpo", MASK, group_size=3)
    with pytest.raises(ValueError, match="needs values"):
        compute_advantages("gae", MASK, token_rewards=torch.zeros(6, 3))
    with pytest.raises(ValueError, match="needs token_rewards"):
        compute_advantages("reinforce_plus_plus", MASK)


def test_unknown_kl_estimator_lists_the_registered_ones():
    with pytest.raises(ValueError) as e:
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")
    msg = message(e)
    assert "kl estimator" in msg.lower() and "'k4'" in msg
    assert all(name in msg for name in KL_ESTIMATORS)


@pytest.mark.parametrize("call", [
    lambda: grpo_advantages(torch.arange(7.0), torch.ones(7, 2), 3),
    lambda: normalize_rewards(torch.arange(7.0), 3),
    lambda: difficulty_mask(torch.arange(7.0), 3),
    lambda: difficulty_weights(torch.arange(7.0), 2),
])
def test_group_size_that_does_not_divide_the_batch_is_named(call):
    with pytest.raises(ValueError) as e:
        call()
    msg = message(e)
    assert "group_size" in msg and "7" in msg


def test_group_size_below_one_is_refused():
    with pytest.raises(ValueError, match="group_size must be >= 1, got 0"):
        grpo_advantages(SCORES, MASK, 0)


def test_difficulty_mask_low_not_below_high_is_named():
    with pytest.raises(ValueError) as e:
        difficulty_mask(SCORES, 3, low=0.9, high=0.9)
    msg = message(e)
    assert "low" in msg and "high" in msg and "0.9" in msg and "<" in msg
    with pytest.raises(ValueError, match="min_weight"):
        difficulty_weights(SCORES, 3, min_weight=3.0, max_weight=2.0)


@pytest.mark.parametrize("clip", [-1.0, 0.0])
def test_non_positive_reward_clip_is_refused(clip):
    with pytest.raises(ValueError) as e:
        clip_rewards(SCORES, clip)
    msg = message(e)
    assert "clip" in msg and "> 0" in msg and str(clip) in msg


@pytest.mark.parametrize("kwargs,names", [
    (dict(clip_low=-0.1), ["clip_low", "-0.1", ">= 0"]),
    (dict(clip_high=-0.2), ["clip_high", "-0.2", ">= 0"]),
    (dict(dual_clip=1.0), ["dual_clip", "1.0", "> 1"]),
    (dict(dual_clip=0.5), ["dual_clip", "0.5", "> 1"]),
    (dict(loss_agg_mode="token_mean"), ["loss_agg_mode", "'token_mean'", *LOSS_AGG_MODES]),
])
def test_bad_policy_loss_arguments_are_named_with_valid_values(kwargs, names):
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError) as e:
        ppo_policy_loss(lp, lp, lp, torch.ones(2, 3), **kwargs)
    msg = message(e)
    assert all(n in msg for n in names), msg


def test_bad_aggregation_arguments_are_named():
    with pytest.raises(ValueError) as e:
        aggregate_loss(torch.zeros(2, 3), torch.ones(2, 3), "mean")
    assert "loss_agg_mode" in message(e) and all(m in message(e) for m in LOSS_AGG_MODES)
    with pytest.raises(ValueError, match="norm_length"):
        aggregate_loss(torch.zeros(2, 3), torch.ones(2, 3), "seq-mean-token-sum-norm", norm_length=0)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        aggregate_loss(torch.zeros(2, 3), torch.ones(2, 4))


def test_value_clip_range_must_be_positive():
    v = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="clip_range must be > 0 or None, got -0.5"):
        value_loss(v, v, v, torch.ones(2, 3), clip_range=-0.5)


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan")])
def test_non_positive_temperature_is_refused(temperature):
    logits = torch.zeros(2, 3, 5)
    labels = torch.zeros(2, 3, dtype=torch.long)
    for call in (lambda: logprobs_from_logits(logits, labels, temperature),
                 lambda: entropy_from_logits(logits, temperature)):
        with pytest.raises(ValueError) as e:
            call()
        assert "temperature" in message(e) and "> 0" in message(e)


def test_logprob_shape_and_chunk_errors_are_named():
    with pytest.raises(ValueError, match="chunk_size"):
        logprobs_from_logits(torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), chunk_size=0)
    with pytest.raises(ValueError, match="labels shape"):
        logprobs_from_logits(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("field", ["mean_type", "std_type"])
def test_unknown_normalisation_type_lists_the_valid_ones(field):
    with pytest.raises(ValueError) as e:
        normalize_rewards(SCORES, 3, **{field: "grp"})
    msg = message(e)
    assert field in msg and "'grp'" in msg and all(t in msg for t in NORM_TYPES)


def test_kl_controller_arguments_are_checked():
    with pytest.raises(ValueError, match="kl_coef"):
        FixedKLController(-0.1)
    with pytest.raises(ValueError, match="target"):
        AdaptiveKLController(0.1, target=0.0, horizon=10)
    with pytest.raises(ValueError, match="horizon"):
        AdaptiveKLController(0.1, target=1.0, horizon=0)
