"""Reward processing of step-wise turn samples (issue 30, item 19): ``process_rewards`` with
``episode_size`` rows per episode leaves a sample's whole episode out of RLOO's baseline, and
``algorithm.group_stats`` says whether an episode counts once (the default) or once per turn sample
in GRPO's mean and std; empty slots enter nothing."""

from __future__ import annotations

import statistics

import pytest
import torch

from steadyrl.config import load_config
from steadyrl.errors import ConfigError
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards

torch.set_num_threads(1)

# one prompt, two episodes laid out in 3 slots: a 3-turn success (1.0) and a 1-turn failure (0.0)
SCORES = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
VALID = torch.tensor([True, True, True, True, False, False])
MASK = VALID.unsqueeze(-1).expand(-1, 4).long()


def _process(*overrides, episode_size=3):
    algo = load_config(None, list(overrides)).algorithm
    return process_rewards(RewardInputs(SCORES, VALID, MASK, torch.zeros(6, dtype=torch.bool), 6,
                                        episode_size=episode_size), algo)


@pytest.mark.parametrize("counting", ["episode", "sample"])
def test_rloo_baselines_a_turn_sample_on_the_other_episodes_only(counting):
    got = _process("algorithm.advantage_estimator=rloo", f"algorithm.group_stats={counting}")
    assert got.advantages[:, 0].tolist() == pytest.approx([1.0, 1.0, 1.0, -1.0, 0.0, 0.0])
    assert got.loss_mask[4:].sum() == 0  # empty slots


def test_grpo_counts_each_episode_once_by_default():
    assert load_config(None, []).algorithm.group_stats == "episode"
    got = _process()
    std = statistics.stdev([1.0, 0.0])
    assert got.advantages[:, 0].tolist()[:4] == pytest.approx([0.5 / (std + 1e-6)] * 3 + [-0.5 / (std + 1e-6)],
                                                              rel=1e-6)


def test_sample_counting_is_todays_per_row_statistic():
    got = _process("algorithm.group_stats=sample")
    rows = [1.0, 1.0, 1.0, 0.0]
    mean, std = statistics.fmean(rows), statistics.stdev(rows)
    assert got.advantages[:4, 0].tolist() == pytest.approx([(r - mean) / (std + 1e-6) for r in rows], rel=1e-6)
    one_row = _process("algorithm.group_stats=sample", episode_size=1)
    assert torch.equal(one_row.advantages, got.advantages)


def test_a_bad_group_stats_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["algorithm.group_stats=turn"])
    assert "algorithm.group_stats" in str(info.value) and "episode" in str(info.value)
