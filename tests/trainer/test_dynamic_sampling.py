"""Dynamic sampling (``algorithm.dynamic_sampling``): groups without a signal are refilled.

* the filters on hand-made scores;
* where every group already varies, a run with it equals the run without it, step for step
  (metrics and weights);
* where some groups never vary, extra draws refill the step with informative groups only, and
  the draws are counted; when the draws run out the step trains on what it has;
* a resumed run replays the extra draws exactly (the sampler's position is in the checkpoint).
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from steadyrl.config.schema import AlgorithmConfig
from steadyrl.tracking import read_jsonl
from steadyrl.recipe import train
from steadyrl.trainer.dynamic import informative_groups

REWARDS = '''
def varied(prompts, completions, **columns):
    """Every group of 4 varies: 0, 1, 2, 3 (called on whole batches: rewards[].chunk_size null)."""
    return [float(i % 4) for i in range(len(completions))]


def flat_for_a(prompts, completions, answer, **columns):
    """Groups whose answer has 3 letters score 1.0 four times (no signal); the others vary."""
    return [1.0 if len(a) == 3 else float(i % 2) for i, a in enumerate(answer)]
'''


def test_filters_on_hand_made_scores():
    algo = AlgorithmConfig(dynamic_sampling=True)
    scores = torch.tensor([1.0, 1, 1, 1, 0, 1, 0, 1, 2, 2, 5, 2, 0, 0, 0, 0])
    valid = torch.ones(16, dtype=torch.bool)
    valid[10] = False  # the only different score of group 2 is invalid: no signal left
    assert informative_groups(scores, valid, 4, algo).tolist() == [False, True, False, False]
    hard = AlgorithmConfig(dynamic_sampling=True, dynamic_sampling_filter="difficulty")
    accuracy = torch.tensor([1.0, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0])
    assert informative_groups(accuracy, torch.ones(16, dtype=torch.bool), 4, hard).tolist() == [False, True, False, True]


@pytest.fixture
def write_config(tiny_model_dir, tmp_path):
    from steadyrl.demo.task import make_splits

    rows, _ = make_splits(48, 0, min_len=3, max_len=4, seed=0)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text(REWARDS)

    def write(name: str, reward: str, **algorithm) -> str:
        config = {
            "model": {"name_or_path": str(tiny_model_dir)},
            "data": {"train_path": str(tmp_path / "train.jsonl"), "shuffle": False},
            "rewards": [{"name": f"{tmp_path / 'rewards.py'}:{reward}", "chunk_size": None}],  # whole batches
            "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 5},
            "algorithm": {"kl_mode": "none", **algorithm},
            "optim": {"lr": 1e-3},
            "trainer": {"max_steps": 3, "save_every": 2, "device": "cpu", "num_threads": 1, "samples_every": 0},
            "eval": {"num_samples": 0},
        }
        path = tmp_path / name
        path.write_text(yaml.safe_dump(config))
        return str(path)

    return write


def _rows(run_dir, drop=("time/", "throughput/", "dynamic/")):
    return [{k: v for k, v in m.items() if not k.startswith(drop)} for m in read_jsonl(run_dir / "metrics.jsonl")]


def _weights(run_dir):
    from safetensors.torch import load_file

    from steadyrl.run.checkpoint import latest_checkpoint

    return load_file(latest_checkpoint(run_dir / "checkpoints") / "policy" / "model.safetensors")


def test_where_every_group_varies_the_run_equals_the_run_without_it(write_config, tmp_path):
    train(write_config("off.yaml", "varied"), [], output_dir=str(tmp_path / "off"))
    train(write_config("on.yaml", "varied", dynamic_sampling=True), [], output_dir=str(tmp_path / "on"))
    assert _rows(tmp_path / "on") == _rows(tmp_path / "off")
    on, off = _weights(tmp_path / "on"), _weights(tmp_path / "off")
    assert all(torch.equal(on[k], off[k]) for k in off)
    dynamic = [m for m in read_jsonl(tmp_path / "on" / "metrics.jsonl") if "dynamic/draws" in m]
    assert [m["dynamic/draws"] for m in dynamic] == [1.0, 1.0, 1.0]


def test_flat_groups_are_refilled_from_extra_draws_and_resume_replays_them(write_config, tmp_path):
    config = write_config("flat.yaml", "flat_for_a", dynamic_sampling=True, dynamic_sampling_max_draws=6)
    train(config, [], output_dir=str(tmp_path / "full"))
    steps = [m for m in read_jsonl(tmp_path / "full" / "metrics.jsonl") if "dynamic/draws" in m]
    assert any(m["dynamic/draws"] > 1 for m in steps)
    assert sum(m["dynamic/filtered_groups/equal_scores"] for m in steps) > 0
    for m in steps:  # a step filled with informative groups has no zero-std group
        assert m["dynamic/short_groups"] == 0 and m["batch/zero_std_group_frac"] == 0.0

    import support

    cut = support.crashed_copy(tmp_path / "full", tmp_path / "cut", last_step=3, steps_kept=2)
    train(config, [], output_dir=str(cut), resume=True)
    assert _rows(cut, drop=("time/", "throughput/")) == _rows(tmp_path / "full", drop=("time/", "throughput/"))


def test_when_the_draws_run_out_the_step_trains_on_what_it_has(write_config, tmp_path):
    config = write_config("short.yaml", "flat_for_a", dynamic_sampling=True, dynamic_sampling_max_draws=1)
    train(config, [], output_dir=str(tmp_path / "run"))
    steps = [m for m in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "dynamic/draws" in m]
    assert all(m["dynamic/draws"] == 1.0 for m in steps)
    short = [m["dynamic/short_groups"] for m in steps]
    assert sum(short) > 0  # the flat groups stayed in the batch, masked out of the loss
    for m in steps:
        assert m["batch/valid_sample_frac"] == pytest.approx(1 - m["dynamic/short_groups"] / 4)


@pytest.mark.parametrize("n", [3, 6, 7, 12])
def test_equal_scores_whose_float_mean_does_not_round_back_are_filtered(n):
    """Groups of n equal scores k * 0.05: every GRPO advantage is exactly 0, so every group is
    signal-free; a mean taken as sum / n (three 0.1s: 0.10000000000000002) kept some of them."""
    from steadyrl.functional import grpo_advantages

    scores = torch.tensor([k * 0.05 for k in range(21) for _ in range(n)], dtype=torch.float64)
    valid = torch.ones(len(scores), dtype=torch.bool)
    assert not grpo_advantages(scores, torch.ones(len(scores), 1), n).any()
    assert not informative_groups(scores, valid, n, AlgorithmConfig(dynamic_sampling=True)).any()


def test_difficulty_filter_and_difficulty_mask_agree_at_the_thresholds():
    """One rule for both, the exact group mean: [0.1] * 3 has mean exactly 0.1 and [0.95] * 3
    exactly 0.95, both out (their float means, 0.10000000000000002 and 0.9499999999999998, were in);
    the others are a double's hair off a threshold, decided by the oracle in rationals."""
    from fractions import Fraction

    from steadyrl.functional import difficulty_mask

    algo = AlgorithmConfig(dynamic_sampling=True, dynamic_sampling_filter="difficulty")
    groups = [[0.1, 0.1, 0.1], [0.05, 0.15, 0.1], [0.95, 0.95, 0.95], [0.2, 0.3, 0.4], [0.9, 1.0, 0.95]]
    scores = torch.tensor([s for g in groups for s in g], dtype=torch.float64)
    valid = torch.ones(len(scores), dtype=torch.bool)
    exact = [Fraction(algo.difficulty_low) < sum(map(Fraction, g)) / 3 < Fraction(algo.difficulty_high) for g in groups]
    kept = informative_groups(scores, valid, 3, algo)
    assert kept.tolist() == exact
    mask = difficulty_mask(scores, 3, algo.difficulty_low, algo.difficulty_high, mask=valid)
    assert mask.tolist() == [k for k in exact for _ in range(3)]
