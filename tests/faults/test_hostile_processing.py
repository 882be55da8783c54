"""Hostile inputs through the trainer's whole reward path, not the functions one by one.

``process_rewards`` is the step's pipeline from raw scores to advantages (clip, normalise, KL in
the reward, masks, estimator, whitening, advantage clip). Hypothesis draws the algorithm
settings (every advantage estimator, reward clip on/off, every normalisation, whitening,
advantage clip, difficulty mask and weights, mask_truncated, KL in the reward with random old
and reference log-probs) and hostile batches: scores of +-1e6 and 1e-30, all equal, NaN / inf
scores marked invalid, groups of one, empty responses, responses at the length limit. Every
output tensor and every metric must be finite, and advantages must be 0 on padding and on
samples that leave the loss. A few such batches then go through ``ppo_update`` on the tiny
model: its weights stay finite. Last, whole runs of ``train`` on rewards of +-1e6, all-equal
rewards, groups of one and responses cut at the length limit: no metric is NaN or inf.
"""

from __future__ import annotations

import math
from typing import get_args

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.config import load_config
from steadyrl.config.schema import AlgorithmConfig, KLEstimator
from steadyrl.functional import ADVANTAGE_ESTIMATORS, NORM_TYPES, RunningMoments
from steadyrl.models import load_policy
from steadyrl.recipe import train
from steadyrl.trainer.batch import TrainBatch
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards
from steadyrl.trainer.update import ppo_update

BAD_SCORES = (float("nan"), float("inf"), float("-inf"), 3e38)
SCALES = {"huge": 1e6, "extreme": 1e30, "tiny": 1e-30, "unit": 1.0}


@st.composite
def algorithms(draw) -> AlgorithmConfig:
    estimator = draw(st.sampled_from(sorted(ADVANTAGE_ESTIMATORS)))
    return AlgorithmConfig(
        advantage_estimator=estimator,
        norm_by_std=draw(st.booleans()),
        reward_clip=draw(st.sampled_from([None, 1.0, 10.0])),
        reward_norm_mean=draw(st.sampled_from(NORM_TYPES)),
        reward_norm_std=draw(st.sampled_from(NORM_TYPES)),
        whiten_advantages=draw(st.booleans()),
        advantage_clip=draw(st.sampled_from([None, 0.5, 5.0])),
        kl_mode=draw(st.sampled_from(["none", "loss", "reward"])),
        kl_estimator=draw(st.sampled_from(get_args(KLEstimator))),
        difficulty_mask=draw(st.booleans()),
        difficulty_weighting=draw(st.booleans()),
        mask_truncated=draw(st.booleans()),
        gamma=draw(st.sampled_from([1.0, 0.9])),
        lam=draw(st.sampled_from([0.95, 1.0, 0.0])),
    )


def _turn_rewards(draw, g: torch.Generator, b: int, t: int) -> torch.Tensor | None:
    """Multi-turn or not: earlier turns' environment rewards on some tokens, hostile magnitudes too."""
    if not draw(st.booleans()):
        return None
    where = torch.rand(b, t, generator=g) < 0.3
    rewards = torch.randn(b, t, generator=g, dtype=torch.float64) * SCALES[draw(st.sampled_from(sorted(SCALES)))]
    return torch.where(where, rewards, torch.zeros((), dtype=torch.float64))


@st.composite
def batches(draw) -> dict:
    """One step's reward-path inputs; the tensors are filled from a drawn seed."""
    group_size = draw(st.sampled_from([1, 1, 2, 3, 4]))
    groups = draw(st.integers(1, 3))
    b, t = group_size * groups, draw(st.integers(1, 6))
    lengths = draw(st.lists(st.sampled_from([0, 1, t, *range(t + 1)]), min_size=b, max_size=b))
    kind = draw(st.sampled_from(["huge", "extreme", "tiny", "unit", "binary", "equal"]))
    invalid = draw(st.lists(st.booleans(), min_size=b, max_size=b))
    bad = draw(st.lists(st.sampled_from(BAD_SCORES), min_size=b, max_size=b))
    logprob_scale = draw(st.sampled_from([0.0, 1.0, 30.0, 1e4]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))

    if kind == "equal":
        scores = torch.full((b,), draw(st.sampled_from([0.0, 1.0, -1e6, 1e6, 1e30, 1e-30])))
    elif kind == "binary":
        scores = torch.randint(0, 2, (b,), generator=g).float()
    else:
        signs = torch.randint(0, 2, (b,), generator=g).float() * 2 - 1
        spread = torch.rand(b, generator=g) + 0.5 if draw(st.booleans()) else torch.ones(b)
        scores = signs * SCALES[kind] * spread
    valid = ~torch.tensor(invalid)
    scores = torch.where(valid, scores, torch.tensor(bad))
    mask = (torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()
    truncated = torch.tensor(lengths) == t  # at the length limit, as the engine reports it
    return {
        "scores": scores, "valid": valid, "response_mask": mask, "truncated": truncated,
        "group_size": group_size,
        "old_logprobs": -(torch.randn(b, t, generator=g).abs() * logprob_scale),
        "ref_logprobs": -(torch.randn(b, t, generator=g).abs() * logprob_scale),
        "values": torch.randn(b, t, generator=g) * draw(st.sampled_from([0.0, 1.0, 1e6])),
        "kl_coef": draw(st.sampled_from([0.0, 0.001, 1.0])),
        "turn_rewards": _turn_rewards(draw, g, b, t),
    }


def _process(algo: AlgorithmConfig, x: dict, running: RunningMoments):
    inputs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in x.items()}
    out = process_rewards(RewardInputs(inputs["scores"], inputs["valid"], inputs["response_mask"],
                                       inputs["truncated"], x["group_size"], old_logprobs=inputs["old_logprobs"],
                                       ref_logprobs=inputs["ref_logprobs"],
                                       values=inputs["values"] if algo.advantage_estimator == "gae" else None,
                                       turn_rewards=inputs.get("turn_rewards")),
                          algo, RewardSettings(kl_coef=x["kl_coef"], running=running))
    for key, value in x.items():  # no input is mutated
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, inputs[key]) or (value.isnan() == inputs[key].isnan()).all(), key
    return out


def _check(out, x: dict) -> None:
    mask = x["response_mask"].bool()
    for name in ("advantages", "returns"):
        tensor = getattr(out, name)
        assert tensor.shape == mask.shape, name
        assert torch.isfinite(tensor).all(), (name, tensor)
    for name, value in out.metrics.items():
        assert math.isfinite(value), (name, value)
    loss_mask = out.loss_mask.bool()
    assert not (loss_mask & ~mask).any(), "padding entered the loss"
    assert not loss_mask[~x["valid"]].any(), "a sample with an invalid reward entered the loss"
    assert (out.advantages[~loss_mask] == 0).all(), "advantage on padding or on an excluded sample"
    assert (out.returns[~mask] == 0).all(), "return on padding"
    if out.sample_weights is not None:
        w = out.sample_weights
        assert torch.isfinite(w).all() and (w >= 0.5).all() and (w <= 2.0).all(), w
    assert 0.0 <= out.metrics["batch/valid_sample_frac"] <= 1.0


@settings(max_examples=150)
@given(algo=algorithms(), x=batches())
def test_reward_path_stays_finite_and_masked_on_hostile_batches(algo, x):
    _check(_process(algo, x, RunningMoments()), x)


@settings(max_examples=30)
@given(algo=algorithms(), steps=st.lists(batches(), min_size=2, max_size=4))
def test_reward_path_stays_finite_over_steps_that_share_running_statistics(algo, steps):
    """Running normalisation carries state from step to step: a hostile step must not poison the next."""
    running = RunningMoments()
    for x in steps:
        _check(_process(algo, x, running), x)
        assert math.isfinite(running.mean) and math.isfinite(running.std), running


def test_scores_that_are_not_finite_never_count_even_if_marked_valid():
    """Defence in depth: the scorer marks NaN / inf invalid, but should one slip through as
    'valid', the pipeline treats it as invalid rather than training on it."""
    algo = AlgorithmConfig(advantage_estimator="grpo", reward_norm_mean="batch", reward_norm_std="batch")
    mask = torch.ones(4, 3, dtype=torch.long)
    out = process_rewards(RewardInputs(torch.tensor([1.0, float("nan"), float("inf"), 0.0]),
                                       torch.ones(4, dtype=torch.bool), mask, torch.zeros(4, dtype=torch.bool), 4),
                          algo)
    assert torch.isfinite(out.advantages).all()
    assert out.loss_mask.sum(-1).tolist() == [3, 0, 0, 3]
    assert all(math.isfinite(v) for v in out.metrics.values()), out.metrics


@pytest.mark.parametrize("estimator", sorted(ADVANTAGE_ESTIMATORS))
@pytest.mark.parametrize("norm", ["batch", "group", "none"])
@pytest.mark.parametrize("whiten", [False, True])
def test_an_invalid_sample_moves_no_other_samples_advantage(estimator, norm, whiten):
    """A sample whose reward function failed enters no statistic (normalisation, baselines,
    whitening): neither the placeholder score it carries nor its length moves the others."""
    algo = AlgorithmConfig(advantage_estimator=estimator, reward_norm_mean=norm, reward_norm_std=norm,
                           whiten_advantages=whiten)
    valid = torch.ones(8, dtype=torch.bool)
    valid[1] = False
    values = torch.linspace(-0.5, 0.5, 40).reshape(8, 5)
    outs = []
    for placeholder, invalid_length in [(0.0, 5), (1.0, 5), (-7.0, 1), (0.0, 3)]:
        mask = torch.ones(8, 5, dtype=torch.long)
        mask[3, 2:] = 0
        mask[1, invalid_length:] = 0
        scores = torch.tensor([1.0, placeholder, 0.0, 1.0, 0.5, 0.0, 0.0, 1.0])
        outs.append(process_rewards(RewardInputs(scores, valid, mask, torch.zeros(8, dtype=torch.bool), 4,
                                                 values=values), algo).advantages)
        assert outs[-1][1].abs().sum() == 0  # out of the loss
    for other in outs[1:]:
        torch.testing.assert_close(other, outs[0], rtol=0, atol=1e-6)


# --- the same batches through the update on the tiny model ----------------------------------------
CPU = torch.device("cpu")
PROMPT = 3


def _train_batch(x: dict, out, vocab: int, seed: int) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    b, t = x["response_mask"].shape
    prompt_ids = torch.randint(3, vocab, (b, PROMPT), generator=g)
    response_ids = torch.randint(3, vocab, (b, t), generator=g)
    attention = torch.cat([torch.ones_like(prompt_ids), x["response_mask"]], 1)
    return TrainBatch(
        input_ids=torch.cat([prompt_ids, response_ids], 1), attention_mask=attention,
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0), response_ids=response_ids,
        response_mask=x["response_mask"], loss_mask=out.loss_mask, advantages=out.advantages,
        returns=out.returns, sample_weights=out.sample_weights,
        old_logprobs=x["old_logprobs"], ref_logprobs=x["ref_logprobs"],
    )


@pytest.fixture(scope="module")
def tiny_policy(tiny_model_dir):
    return load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)


@settings(max_examples=8)
@given(algo=algorithms(), x=batches(), loss=st.sampled_from(["ppo", "gspo", "cispo", "vanilla_pg"]),
       agg=st.sampled_from(["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]))
def test_hostile_batch_through_the_update_leaves_the_weights_finite(tiny_policy, algo, x, loss, agg):
    out = _process(algo, x, RunningMoments())
    if out.loss_mask.sum() == 0:  # the step skips the update (batch/no_valid_sample)
        return
    config = load_config(None, ["trainer.device=cpu", "optim.lr=1.0", f"algorithm.policy_loss={loss}",
                                f"algorithm.loss_agg_mode={agg}", "algorithm.kl_coef=1.0",
                                "algorithm.kl_mode=loss", "trainer.micro_batch_size=2"])
    policy = tiny_policy
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1.0)
    batch = _train_batch(x, out, policy.config.vocab_size, seed=len(x["scores"]))
    metrics, steps, skipped = ppo_update(policy, optimizer, batch, config, kl_coef=1.0, device=CPU)
    assert steps == 1
    for name, p in policy.named_parameters():
        assert torch.isfinite(p).all(), name
    if not skipped:
        assert math.isfinite(metrics["actor/grad_norm"]) and math.isfinite(metrics["actor/loss"]), metrics


# --- every setting, deterministically: the rare combinations hypothesis seldom draws ------------
MAGNITUDES = (1e6, 1e20, 1e30)


@pytest.mark.parametrize("estimator", sorted(ADVANTAGE_ESTIMATORS))
def test_unclipped_unnormalised_rewards_up_to_1e30_stay_finite_in_every_setting(estimator):
    """No clip, every normalisation pair, whitening on and off: squares of 1e20 overflow float32,
    so a pipeline that takes variances in float32 turns them into inf (metrics) or NaN (advantages)."""
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]] * 2)
    for magnitude in MAGNITUDES:
        scores = torch.tensor([1.0, -1.0, 0.5, 0.0, 1.0, 1.0, -0.25, 0.75]) * magnitude
        x = {"scores": scores, "valid": torch.ones(8, dtype=torch.bool), "response_mask": mask,
             "truncated": torch.zeros(8, dtype=torch.bool), "group_size": 4,
             "old_logprobs": -torch.ones(8, 3), "ref_logprobs": -2 * torch.ones(8, 3),
             "values": torch.zeros(8, 3), "kl_coef": 0.1}
        for mean_type in NORM_TYPES:
            for std_type in NORM_TYPES:
                for whiten in (False, True):
                    algo = AlgorithmConfig(advantage_estimator=estimator, reward_norm_mean=mean_type,
                                           reward_norm_std=std_type, whiten_advantages=whiten, kl_mode="reward")
                    _check(_process(algo, x, RunningMoments()), x)


@pytest.mark.parametrize("magnitude", MAGNITUDES)
@pytest.mark.parametrize("estimator,options", [
    ("grpo", {}), ("rloo", {"whiten_advantages": True}),
    ("opo", {"reward_norm_mean": "batch", "reward_norm_std": "batch"}),
    ("reinforce_plus_plus", {}), ("reinforce_plus_plus_baseline", {}),
])
def test_normalised_advantages_do_not_depend_on_the_reward_scale(estimator, options, magnitude):
    """A normalised estimator gives the same advantages for rewards s and 1e20 * s; a float32
    variance overflows at |s| ~ 2e19 and silently returns zero advantages (no signal) instead."""
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]] * 2)
    scores = torch.tensor([1.0, 0.0, 0.0, 0.5, 1.0, 1.0, 0.0, 0.25])
    algo = AlgorithmConfig(advantage_estimator=estimator, **options)

    def advantages(s):
        return process_rewards(RewardInputs(s, torch.ones(8, dtype=torch.bool), mask,
                                            torch.zeros(8, dtype=torch.bool), 4), algo).advantages

    reference = advantages(scores)
    assert reference.abs().max() > 0.1
    torch.testing.assert_close(advantages(scores * magnitude), reference, rtol=1e-4, atol=1e-4)


# --- and end to end, through steadyrl.recipe.train -----------------------------------------------
def _all_finite_metrics(run_dir) -> list[dict]:
    from steadyrl.tracking import read_jsonl

    rows = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["step"] > 0]
    for m in rows:
        bad = [k for k, v in m.items() if v is None or (isinstance(v, float) and not math.isfinite(v))]
        assert not bad, (m["step"], bad)  # a null in metrics.jsonl is a NaN or inf
    return rows


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "ppo", "rloo", "reinforce_plus_plus"])
def test_rewards_of_1e6_train_with_finite_metrics_and_weights(preset, fault_config, reward, checkpoint_weights,
                                                               tmp_path):
    config = fault_config(rewards=[reward("huge", calls=[1, 2], value=1e6)], algorithm={"preset": preset},
                          trainer={"max_steps": 2})
    train(str(config), [], output_dir=str(tmp_path / "run"))
    rows = _all_finite_metrics(tmp_path / "run")
    assert [m["health/skipped_steps"] for m in rows] == [0, 0]
    weights = checkpoint_weights(tmp_path / "run" / "checkpoints" / "step_000002")
    assert all(torch.isfinite(w).all() for w in weights.values())


@pytest.mark.parametrize("case", [
    {"rewards": "constant", "algorithm": {"preset": "grpo"}},  # all equal: every group std 0
    {"rewards": "constant", "algorithm": {"preset": "ppo"}},
    # groups of one, with the estimators that allow them (a group-based one refuses group_size 1)
    {"rollout": {"group_size": 1}, "algorithm": {"preset": "ppo"}},
    {"rollout": {"group_size": 1}, "algorithm": {"preset": "reinforce_plus_plus"}},
    {"rollout": {"max_new_tokens": 1}, "algorithm": {"preset": "reinforce_plus_plus"}},  # all at the limit
    {"rollout": {"max_new_tokens": 1}, "algorithm": {"preset": "grpo", "mask_truncated": True}},  # none left
], ids=["equal-grpo", "equal-ppo", "group1-ppo", "group1-rpp", "limit-rpp", "limit-masked"])
def test_degenerate_batches_train_with_finite_metrics(case, fault_config, reward, tmp_path):
    sections = {k: v for k, v in case.items() if k != "rewards"}
    if "rewards" in case:
        sections["rewards"] = [reward(case["rewards"])]
    config = fault_config(**sections, trainer={"max_steps": 2})
    train(str(config), [], output_dir=str(tmp_path / "run"))
    rows = _all_finite_metrics(tmp_path / "run")
    assert [m["health/skipped_steps"] for m in rows] == [0, 0]
