"""The newer algorithms inside the step: SAPO / KL-Cov / Clip-Cov and the high-entropy selection in
the update (the same parameters for any micro-batch split), DAPO's overlong punishment and GDPO in
reward processing, their config errors, and a tiny ``steadyrl train`` with each switch."""

from __future__ import annotations

from dataclasses import replace

import pytest
import support
import torch

from steadyrl.cli import main
from steadyrl.config import load_config
from steadyrl.errors import ConfigError
from steadyrl.functional import normalize_then_sum, overlong_penalty
from steadyrl.models import load_policy
from steadyrl.rewards.scoring import ScoreResult
from steadyrl.tracking import read_metrics
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards, reward_components
from steadyrl.trainer.selection import select_tokens
from steadyrl.trainer.update import ppo_update

CPU = torch.device("cpu")
torch.set_num_threads(1)


def _batch():
    b = support.tiny_batch(seed=1, rows=8, response=5)
    g = torch.Generator().manual_seed(5)
    return replace(b, ref_logprobs=None, values=None, old_entropy=torch.rand(8, 5, generator=g) * 3)


SWITCHES = [
    ["algorithm.policy_loss=sapo"],
    ["algorithm.policy_loss=kl_cov", "algorithm.kl_cov_ratio=0.2"],
    ["algorithm.policy_loss=clip_cov", "algorithm.clip_cov_ratio=0.2", "algorithm.clip_cov_lb=-10"],
    ["algorithm.top_entropy_quantile=0.3"],
    ["algorithm.top_entropy_quantile=0.5", "algorithm.policy_loss=kl_cov", "algorithm.kl_cov_ratio=0.1"],
]


@pytest.mark.parametrize("switch", SWITCHES, ids=lambda s: "+".join(x.split("=")[0].split(".")[1] + "=" +
                                                                      x.split("=")[1] for x in s))
def test_each_switch_gives_the_same_update_for_any_micro_batch_split(switch, tiny_model_dir):
    """The selections are made once per mini-batch over all its tokens, so cutting it into
    micro-batches of 8, 3 or 1 rows, or by a token budget (trimmed micro-batches), changes nothing
    (float64, SGD)."""
    batch = _batch()
    results = []
    for split in ("trainer.micro_batch_size=8", "trainer.micro_batch_size=3", "trainer.micro_batch_size=1",
                  "trainer.max_tokens_per_micro_batch=20"):
        policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
        config = load_config(None, ["trainer.device=cpu", "algorithm.kl_mode=none", split, *switch])
        torch.manual_seed(0)  # clip_cov's draw
        metrics, _, _ = ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.05), batch, config,
                                   kl_coef=0.0, device=CPU)
        results.append(torch.cat([p.detach().flatten() for p in policy.parameters()]))
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=1e-12)
    torch.testing.assert_close(results[0], results[2], rtol=0, atol=1e-12)
    torch.testing.assert_close(results[0], results[3], rtol=0, atol=1e-9)  # trimmed widths: float32 log-probs
    if "top_entropy_quantile" in switch[0]:
        q = float(switch[0].split("=")[1])
        assert metrics["actor/entropy_selected_frac"] == pytest.approx(q, abs=0.1)


def test_the_entropy_selection_keeps_the_top_tokens_and_drops_the_rest_from_the_gradient(tiny_model_dir):
    batch = _batch()
    config = load_config(None, ["algorithm.top_entropy_quantile=0.25"])
    chosen = select_tokens(batch, config.algorithm)
    mask = batch.loss_mask.bool()
    kept = chosen.token_weights.bool()
    assert not (kept & ~mask).any()
    assert batch.old_entropy[kept].min() >= batch.old_entropy[mask & ~kept].max()
    # a dropped token's advantage does not matter; a kept one's does
    grads = []
    for scale_dropped in (1.0, 100.0):
        adv = torch.where(kept, batch.advantages, batch.advantages * scale_dropped)
        policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
        ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.05), replace(batch, advantages=adv),
                   load_config(None, ["trainer.device=cpu", "algorithm.kl_mode=none",
                                      "algorithm.top_entropy_quantile=0.25"]), kl_coef=0.0, device=CPU)
        grads.append(torch.cat([p.detach().flatten() for p in policy.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-12)


def _processing_inputs():
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    lengths = torch.tensor([2, 6, 8, 10, 10, 3, 9, 1])
    mask = (torch.arange(10) < lengths.unsqueeze(1)).long()
    valid = torch.ones(8, dtype=torch.bool)
    return scores, valid, mask, torch.zeros(8, dtype=torch.bool), lengths


def test_overlong_punishment_is_added_to_the_score_before_the_advantage():
    scores, valid, mask, truncated, lengths = _processing_inputs()
    algo = load_config(None, ["algorithm.overlong_buffer=4", "algorithm.overlong_penalty_factor=0.5",
                              "rollout.max_new_tokens=10"]).algorithm
    out = process_rewards(RewardInputs(scores, valid, mask, truncated, 4), algo, RewardSettings(overlong_limit=10))
    shaped = scores + overlong_penalty(lengths.double(), 10, 4, 0.5).double()
    expected = load_config(None, []).algorithm
    ref = process_rewards(RewardInputs(shaped, valid, mask, truncated, 4), expected)
    torch.testing.assert_close(out.advantages, ref.advantages)
    assert out.metrics["critic/overlong_frac"] == pytest.approx(4 / 8)  # lengths 8, 9, 10, 10 are in the buffer
    assert out.metrics["critic/overlong_penalty_mean"] == pytest.approx(float((shaped - scores).mean()))


def test_overlong_by_turn_sums_each_policy_turns_penalty():
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0, 0, 0, 0, 0]])  # an observation gap
    algo = load_config(None, ["algorithm.overlong_buffer=2", "algorithm.overlong_scope=turn",
                              "rollout.max_new_tokens=4"]).algorithm
    out = process_rewards(RewardInputs(torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.bool), mask,
                                       torch.zeros(2, dtype=torch.bool), 1), algo, RewardSettings(overlong_limit=4))
    assert out.metrics["critic/overlong_penalty_mean"] == pytest.approx((-2.0 + 0.0) / 2)  # two full turns: -1 each


def _result(per_function: dict[str, list[float | None]], weights: dict[str, float]) -> ScoreResult:
    names = list(per_function)
    n = len(next(iter(per_function.values())))
    total = torch.tensor([sum(weights[k] * (v[i] or 0.0) for k, v in per_function.items()) for i in range(n)],
                         dtype=torch.float64)
    return ScoreResult(names=names, weights=weights, raw=per_function, scores=total,
                       valid=torch.ones(n, dtype=torch.bool), failures={})


def test_gdpo_advantage_is_each_reward_normalised_in_its_group_then_summed_and_normalised():
    _, valid, mask, truncated, _ = _processing_inputs()
    result = _result({"correct": [1, 0, 1, 0, 1, 1, 0, 0], "format": [0.2, 0.9, 0.4, None, 0.5, 0.5, 0.1, 0.3]},
                     {"correct": 1.0, "format": 0.5})
    components = reward_components(result)
    assert components.names == ["correct", "format"] and not components.valid[3, 1]
    algo = load_config(None, ["algorithm.reward_aggregation=normalize_then_sum"]).algorithm
    out = process_rewards(RewardInputs(result.scores, valid, mask, truncated, 4, components=components), algo)
    expected, _ = normalize_then_sum(components.scores, 4, components.weights, components.valid)
    for row in range(8):
        got = out.advantages[row][mask[row].bool()]
        assert torch.allclose(got, torch.full_like(got, float(expected[row])), atol=1e-6)
    assert {"critic/advantages/correct_std", "critic/advantages/format_std"} <= set(out.metrics)
    assert reward_components(_result({"only": [1.0, 0.0]}, {"only": 1.0})) is None


@pytest.mark.parametrize("override,needle", [
    ("algorithm.top_entropy_quantile=0", "top_entropy_quantile"),
    ("algorithm.top_entropy_quantile=1.5", "top_entropy_quantile"),
    ("algorithm.kl_cov_ratio=0", "kl_cov_ratio"),
    ("algorithm.clip_cov_lb=6", "clip_cov_lb"),
    ("algorithm.sapo_tau_neg=0", "sapo_tau_neg"),
    ("algorithm.overlong_buffer=600", "overlong_buffer"),
    ("algorithm.policy_loss=sapo2", "policy_loss"),
])
def test_bad_values_of_the_new_keys_are_refused_naming_the_key(override, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(None, [override])


def test_gdpo_with_an_estimator_it_replaces_is_refused_naming_both():
    with pytest.raises(ConfigError, match="normalize_then_sum.*advantage_estimator"):
        load_config(None, ["algorithm.reward_aggregation=normalize_then_sum", "algorithm.advantage_estimator=rloo"])


def test_gdpo_with_a_teacher_mixed_with_the_task_rewards_is_refused_at_load():
    """Before, it loaded and GDPO's advantage ignored the teacher (two teachers, the same advantages)
    while its forward pass was still paid."""
    gdpo = ["algorithm.reward_aggregation=normalize_then_sum", "teacher.name_or_path=some/teacher"]
    with pytest.raises(ConfigError, match="normalize_then_sum.*teacher.task_rewards = true"):
        load_config(None, gdpo)
    pure = load_config(None, [*gdpo, "teacher.task_rewards=false"])  # only the teacher's signal: nothing to aggregate
    assert pure.teacher.name_or_path == "some/teacher"
    mixed = load_config(None, ["teacher.name_or_path=some/teacher"])  # sum: the teacher's reward enters
    assert mixed.algorithm.reward_aggregation == "sum"


def test_a_tiny_run_with_every_new_switch_trains_and_logs_their_metrics(write_config, task_dir, tmp_path):
    rewards = [{"name": f"{task_dir / 'rewards.py'}:reverse_match"},
               {"name": f"{task_dir / 'rewards.py'}:partial_reverse", "weight": 0.5}]
    config = write_config(rewards=rewards, algorithm={
        "policy_loss": "clip_cov", "clip_cov_ratio": 0.1, "top_entropy_quantile": 0.5, "overlong_buffer": 2,
        "reward_aggregation": "normalize_then_sum"})
    out = tmp_path / "run"
    assert main(["train", str(config), "--output-dir", str(out)]) == 0
    rows = [r for r in read_metrics(out) if "actor/pg_loss" in r]
    assert len(rows) == 2
    for key in ("actor/entropy_selected_frac", "actor/cov_selected_frac", "critic/overlong_frac",
                "critic/advantages/reverse_match_std", "critic/advantages/partial_reverse_std"):
        assert all(key in r for r in rows), key
    assert all(0 < r["actor/entropy_selected_frac"] <= 0.75 for r in rows)
