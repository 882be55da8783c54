"""On a CPU, the same config and seed give the same run, run after run: identical metrics
(timing aside) and identical final weights. A different seed gives a different run.

(The SIGKILL test in test_kill_and_resume.py also compares runs made in separate processes
with one made in this process.)
"""

from __future__ import annotations

import pytest
import torch

from steadyrl.recipe import train


@pytest.mark.parametrize("preset", ["grpo", "ppo"])
def test_same_seed_same_run_and_another_seed_another_run(preset, fault_config, read_run, tmp_path):
    sections = {
        "algorithm": {"preset": preset, "kl_mode": "loss" if preset == "grpo" else "reward", "kl_coef": 0.05},
        "rollout": {"temperature": 1.0, "top_p": 0.9},
        "trainer": {"max_steps": 3, "ppo_epochs": 2, "mini_batch_size": 8, "micro_batch_size": 4},
    }
    runs = {}
    for name, seed in (("first", 7), ("second", 7), ("other_seed", 8)):
        config = fault_config(**{**sections, "trainer": {**sections["trainer"], "seed": seed}})
        train(str(config), [], output_dir=str(tmp_path / name))
        runs[name] = read_run(tmp_path / name)

    rows, weights = runs["first"]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["actor/grad_norm"] > 0 for r in rows)
    again_rows, again_weights = runs["second"]
    assert again_rows == rows
    assert weights.keys() == again_weights.keys()
    assert all(torch.equal(weights[k], again_weights[k]) for k in weights)

    other_rows, other_weights = runs["other_seed"]
    assert other_rows != rows
    assert any(not torch.equal(weights[k], other_weights[k]) for k in weights)
