"""Every algorithm preset runs end to end on a tiny model: two steps, finite metrics, a checkpoint."""

import math

import pytest

from steadyrl.config import ALGORITHM_PRESETS
from steadyrl.tracking import read_metrics
from steadyrl.recipe import train

WATCHED = ("reward/mean", "actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/pg_clipfrac",
           "response/length_mean", "time/step_s")


@pytest.mark.parametrize("preset", sorted(ALGORITHM_PRESETS))
def test_preset_runs_two_steps_with_finite_metrics(preset, write_config, tmp_path):
    config = write_config(algorithm={"preset": preset}, trainer={"max_steps": 2, "save_every": 0})
    summary = train(str(config), [], output_dir=str(tmp_path / "run"))
    assert summary["steps"] == 2
    steps = [m for m in read_metrics(tmp_path / "run") if m["step"] > 0]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        for key in WATCHED:
            assert key in m and math.isfinite(m[key]), (preset, key, m.get(key))
        if preset == "ppo":
            assert math.isfinite(m["critic/value_loss"]) and "critic/explained_variance" in m
        if ALGORITHM_PRESETS[preset].get("kl_mode") in ("loss", "reward"):
            assert math.isfinite(m["kl/k3"]) and m["kl/coef"] > 0
    assert (tmp_path / "run" / "checkpoints" / "step_000002" / "policy" / "config.json").is_file()
    if preset == "ppo":
        assert (tmp_path / "run" / "checkpoints" / "step_000002" / "critic" / "value_head.pt").is_file()


def test_max_epochs_ends_the_run_after_that_many_passes_over_the_prompts(write_config, tmp_path):
    # 64 prompts, 4 per step: half an epoch is 8 steps, before max_steps = 20
    config = write_config(trainer={"max_steps": 20, "max_epochs": 0.5})
    summary = train(str(config), [], output_dir=str(tmp_path / "run"))
    assert summary["steps"] == 8
    epochs = [m["epoch"] for m in read_metrics(tmp_path / "run") if m["step"] > 0]
    assert epochs[-1] == 0.5
