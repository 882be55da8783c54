"""A resumed run reproduces the uninterrupted run step for step (on a CPU).

The interrupted run is the uninterrupted run's directory as it stood after the step-2
checkpoint: later checkpoints and metric lines removed, as a crash would have left it.
"""

import json

import pytest
import support

from steadyrl.tracking import read_metrics
from steadyrl.recipe import train

TIMING = ("time/", "throughput/")


def _comparable(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.startswith(TIMING)} for m in metrics]


@pytest.mark.parametrize("preset", ["grpo", "ppo"])
def test_resume_equals_uninterrupted(preset, write_config, task_dir, tmp_path):
    config = write_config(
        rewards=[{"name": f"{task_dir / 'rewards.py'}:partial_reverse"}],
        algorithm={"preset": preset, "kl_coef": 0.05},
        optim={"lr": 1e-3, "schedule": "cosine", "warmup_steps": 1},
        trainer={"max_steps": 4, "save_every": 2, "keep_checkpoints": 3, "ppo_epochs": 2, "mini_batch_size": 8},
    )
    full = tmp_path / "full"
    train(str(config), [], output_dir=str(full))

    crashed = support.crashed_copy(full, tmp_path / "crashed", last_step=4, steps_kept=2)

    summary = train(str(config), [], output_dir=str(crashed), resume=True)
    assert summary["steps"] == 4
    resumed, uninterrupted = _comparable(read_metrics(crashed)), _comparable(read_metrics(full))
    assert [m["step"] for m in resumed] == [0, 1, 2, 3, 4]
    assert all(m["actor/grad_norm"] > 0 for m in uninterrupted[1:])  # the policy really moved
    assert resumed == uninterrupted
    assert summary["eval_after"] == json.loads((full / "summary.json").read_text())["eval_after"]
