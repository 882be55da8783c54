"""Reward functions that fail, end to end through ``steadyrl.trainer.train``.

A reward function is called once per step on the whole batch, in a worker process under its
time limit. An exception or a time-out fails every sample of that call; ``None`` or NaN fails one
sample. Failed samples leave the loss and are counted per function (``reward/<name>/failed``);
the run goes on; the first traceback of each function is printed once; a step with no valid
sample at all trains on nothing (``batch/no_valid_sample`` = 1, weights untouched).
"""

from __future__ import annotations

import math

import pytest
import torch

from steadyrl.tracking import read_jsonl
from steadyrl.trainer import train


def _steps(run_dir) -> dict[int, dict]:
    return {m["step"]: m for m in read_jsonl(run_dir / "metrics.jsonl") if m["step"] > 0}


def test_none_and_nan_samples_leave_the_loss_and_are_counted(fault_config, reward, tmp_path):
    config = fault_config(rewards=[reward("none_and_nan")], trainer={"max_steps": 2})
    out = tmp_path / "run"
    assert train(str(config), [], output_dir=str(out))["steps"] == 2
    for m in _steps(out).values():  # 16 samples a step: 4 None, 4 NaN
        assert m["reward/none_and_nan/failed"] == 8
        assert m["reward/valid_frac"] == 0.5
        assert m["batch/valid_sample_frac"] == 0.5
        assert math.isfinite(m["actor/grad_norm"]) and m["health/skipped_steps"] == 0
        assert all(v is None or math.isfinite(v) for v in m.values() if isinstance(v, float))


def test_exceptions_and_timeouts_fail_their_calls_and_the_first_traceback_is_shown_once(
        fault_config, reward, tmp_path, capfd):
    """Three rewards mixed: one raises on steps 2 and 3, one sleeps past its 2 s limit on step 3,
    one is fine. Steps 2 and 3 have no valid sample (every combined score needs every function):
    they train on nothing; steps 1 and 4 train as usual."""
    config = fault_config(
        rewards=[reward("raises", calls=[2, 3]), reward("sleeps", timeout_s=2.0, calls=[3]),
                 reward("partial_reverse")],
        trainer={"max_steps": 4, "save_every": 1, "keep_checkpoints": 10},
    )
    out = tmp_path / "run"
    summary = train(str(config), [], output_dir=str(out))
    assert summary["steps"] == 4 and summary["skipped_steps"] == 0

    steps = _steps(out)
    assert [steps[s]["reward/raises/failed"] for s in (1, 2, 3, 4)] == [0, 16, 16, 0]
    assert [steps[s]["reward/sleeps/failed"] for s in (1, 2, 3, 4)] == [0, 0, 16, 0]
    assert [steps[s]["reward/partial_reverse/failed"] for s in (1, 2, 3, 4)] == [0, 0, 0, 0]
    assert [steps[s]["reward/valid_frac"] for s in (1, 2, 3, 4)] == [1, 0, 0, 1]
    assert [steps[s]["batch/valid_sample_frac"] for s in (1, 2, 3, 4)] == [1, 0, 0, 1]
    for s in (2, 3):
        assert steps[s]["batch/no_valid_sample"] == 1 and "actor/grad_norm" not in steps[s]
    for s in (1, 4):
        assert "batch/no_valid_sample" not in steps[s] and math.isfinite(steps[s]["actor/grad_norm"])

    printed = capfd.readouterr()
    text = printed.out + printed.err
    assert text.count("reward function 'raises' failed on some samples (shown once)") == 1
    assert text.count("ValueError: the verifier cannot parse this batch") == 1
    assert text.count("reward function 'sleeps' failed on some samples (shown once)") == 1
    assert "timed out after 2 s" in text
    assert "'partial_reverse' failed" not in text
    assert text.count("no sample could enter the loss") == 1  # step 2; step 3 is only counted
    assert [steps[s]["health/warnings"] for s in (1, 2, 3, 4)] == [0, 2, 3, 3]


def test_a_reward_that_fails_for_every_sample_skips_training_without_crashing(
        fault_config, reward, checkpoint_weights, tiny_model_dir, tmp_path, capfd, recwarn):
    config = fault_config(rewards=[reward("always_raises")], trainer={"max_steps": 3, "save_every": 0})
    out = tmp_path / "run"
    summary = train(str(config), [], output_dir=str(out))
    assert summary["steps"] == 3 and summary["skipped_steps"] == 0

    for m in _steps(out).values():
        assert m["batch/no_valid_sample"] == 1
        assert m["reward/always_raises/failed"] == 16 and m["reward/valid_frac"] == 0
        assert "reward/mean" not in m  # a mean over no sample is left out, not reported as NaN or 0
        assert m["health/skipped_steps"] == 0  # nothing was attempted, so nothing was skipped
        assert all(v is None or math.isfinite(v) for v in m.values() if isinstance(v, float))

    from safetensors.torch import load_file

    initial = load_file(tiny_model_dir / "model.safetensors")
    final = checkpoint_weights(out / "checkpoints" / "step_000003")
    assert final.keys() == initial.keys()
    for name in initial:
        assert torch.equal(final[name], initial[name]), name
    printed = capfd.readouterr()
    assert (printed.out + printed.err).count("RuntimeError: this reward is broken for every sample") == 1
    # torch's "lr_scheduler.step() before optimizer.step()" would only confuse: the schedule
    # counts training steps on purpose, those that trained on nothing included
    assert not [w for w in recwarn if "lr_scheduler" in str(w.message)]


@pytest.mark.parametrize("isolation", ["thread", "inline"])
def test_a_failing_reward_is_contained_in_every_isolation(fault_config, reward, isolation, tmp_path):
    item = {**reward("raises", calls=[1]), "isolation": isolation}
    config = fault_config(rewards=[item], trainer={"max_steps": 2})
    out = tmp_path / "run"
    assert train(str(config), [], output_dir=str(out))["steps"] == 2
    steps = _steps(out)
    assert steps[1]["reward/raises/failed"] == 16 and steps[1]["batch/no_valid_sample"] == 1
    assert steps[2]["reward/raises/failed"] == 0 and math.isfinite(steps[2]["actor/grad_norm"])
