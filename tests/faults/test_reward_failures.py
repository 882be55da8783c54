"""Reward functions that fail, end to end through ``steadyrl.recipe.train``.

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
from steadyrl.recipe import train


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
    config = fault_config(rewards=[reward("always_raises")],
                          trainer={"max_steps": 3, "save_every": 0, "max_consecutive_skips": 4})
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


def test_steps_with_no_valid_reward_in_a_row_halt_the_run_with_its_state_saved(
        fault_config, reward, checkpoint_weights, tiny_model_dir, tmp_path, capsys):
    """trainer.max_consecutive_skips steps in a row where every sample failed a reward: exit 1 with
    one line, like a run of non-finite steps, instead of training on nothing forever."""
    from safetensors.torch import load_file

    from steadyrl import cli

    config = fault_config(rewards=[reward("always_raises")], trainer={"max_steps": 6, "max_consecutive_skips": 2})
    out = tmp_path / "run"
    code = cli.main(["train", str(config), "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("steadyrl:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("steadyrl: training stopped: 2 steps in a row had no sample with a valid reward")
    assert "step_000002" in lines[0]
    assert sorted(_steps(out)) == [1, 2]
    initial = load_file(tiny_model_dir / "model.safetensors")
    saved = checkpoint_weights(out / "checkpoints" / "step_000002")
    assert all(torch.equal(saved[k], initial[k]) for k in initial)
    assert not (out / "summary.json").exists()


def test_steps_with_no_valid_reward_that_are_not_in_a_row_do_not_halt(fault_config, reward, tmp_path):
    config = fault_config(rewards=[reward("raises", calls=[1, 3, 5])],
                          trainer={"max_steps": 5, "max_consecutive_skips": 2})
    out = tmp_path / "run"
    assert train(str(config), [], output_dir=str(out))["steps"] == 5
    assert [m.get("batch/no_valid_sample", 0) for m in _steps(out).values()] == [1, 0, 1, 0, 1]


def test_a_reward_whose_signature_cannot_take_the_first_call_stops_the_run_with_exit_2(
        fault_config, reward, tmp_path, steadyrl_cli_env):
    """Every sample of the first step failed with a binding TypeError: exit 2, naming the function
    and the call, before anything is trained (no checkpoint, no metrics line for step 1)."""
    import subprocess
    import sys

    config = fault_config(rewards=[reward("needs_solution")])
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "steadyrl", "train", str(config), "--output-dir", str(out)],
                          env=steadyrl_cli_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("steadyrl:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "'needs_solution' cannot be called as needs_solution(prompts=..., completions=..., " \
           "completion_ids=..., answer=...)" in lines[0]
    assert "missing a required argument: 'solution'" in lines[0]
    assert not (out / "checkpoints").exists() or not list((out / "checkpoints").iterdir())


def test_a_type_error_inside_the_function_is_an_ordinary_failure(fault_config, reward, tmp_path, capfd):
    config = fault_config(rewards=[reward("type_error_inside")], trainer={"max_steps": 2})
    out = tmp_path / "run"
    assert train(str(config), [], output_dir=str(out))["steps"] == 2
    assert all(m["reward/type_error_inside/failed"] == 16 for m in _steps(out).values())
    printed = capfd.readouterr()
    assert "TypeError: unsupported operand" in printed.out + printed.err
