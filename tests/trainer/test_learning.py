"""End to end: the built-in demo's mean reward rises under GRPO (fixed seed, a trend over many
steps, not one noisy step), and held-out accuracy after RL beats accuracy before it."""

import json

import pytest

from steadyrl.tracking import read_metrics
from steadyrl.recipe import train

SMALL_DEMO = [
    "trainer.max_steps=60", "trainer.save_every=0", "trainer.samples_every=0",
    "rollout.prompts_per_step=16", "demo.num_train=1000", "demo.num_eval=100", "eval.num_samples=0",
]


@pytest.mark.slow
def test_demo_reward_rises_over_sixty_grpo_steps(tmp_path):
    summary = train(None, SMALL_DEMO, output_dir=str(tmp_path / "run"))
    rewards = [m["reward/mean"] for m in read_metrics(tmp_path / "run") if m["step"] > 0]
    assert len(rewards) == 60
    first, last = sum(rewards[:15]) / 15, sum(rewards[-15:]) / 15
    assert last > first + 0.1, (first, last)
    assert summary["eval_after"]["accuracy"] > summary["eval_before"]["accuracy"] + 0.1
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {"steps", "wall_time_s", "eval_before", "eval_after"} <= set(saved)
    assert {"accuracy", "reward_mean"} <= set(saved["eval_before"]) and saved["steps"] == 60
