"""SIGKILL in the middle of a run and in the middle of a save, then ``--resume``: the run ends
exactly where an uninterrupted one does (same metrics, timing aside, and same weights).

``python -m steadyrl train`` runs as a real process (10 steps of the tiny model, a checkpoint
every 2 steps). Run A is killed between checkpoints; run B is killed the moment a
``.tmp-step_*`` directory appears after its first checkpoint (a save under way). No test hook:
the test watches the run directory. Both are resumed to the end (A and B side by side, to use
both cores) and compared with an uninterrupted run of the same config, in this process.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from steadyrl.tracking import read_jsonl
from steadyrl.trainer import train

DEADLINE_S = 120
POLL_S = 0.0005  # a save of the tiny model lasts ~10 ms


def _wait_for(procs, condition, what: str):
    """Poll until ``condition()`` is truthy; every process in ``procs`` must still be running."""
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        found = condition()
        if found:
            return found
        for proc in procs:
            assert proc.poll() is None, f"a run ended (status {proc.returncode}) before {what}"
        time.sleep(POLL_S)
    raise AssertionError(f"timed out waiting for {what}")


def _kill(proc) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def _saving(checkpoints: Path, step: int) -> list[str]:
    try:
        return [e.name for e in os.scandir(checkpoints) if e.name.startswith(f".tmp-step_{step:06d}")]
    except FileNotFoundError:
        return []


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def _last_step(run_dir: Path) -> int:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    return int(rows[-1]["step"]) if rows else 0


def _finish(proc, run_dir: Path) -> str:
    log = run_dir.with_name(run_dir.name + ".log")
    assert proc.wait(timeout=DEADLINE_S) == 0, log.read_text()[-3000:]
    return log.read_text()


@pytest.mark.slow
def test_sigkill_mid_run_and_mid_save_then_resume_equals_an_uninterrupted_run(
        fault_config, start_train, read_run, tmp_path):
    config = fault_config(
        algorithm={"kl_mode": "loss", "kl_coef": 0.05, "reward_norm_mean": "running", "reward_norm_std": "running"},
        optim={"lr": 1e-3, "schedule": "cosine", "warmup_steps": 2},
        trainer={"max_steps": 10, "save_every": 2, "keep_checkpoints": 2, "ppo_epochs": 2, "mini_batch_size": 8},
    )
    a, b = tmp_path / "a", tmp_path / "b"
    proc_a, proc_b = start_train(config, a), start_train(config, b)

    # B: killed while step 4 is being saved, step_000002 complete beside it
    _wait_for([proc_b], lambda: _saving(b / "checkpoints", 4), "run B saving step 4")
    _kill(proc_b)
    assert _saving(b / "checkpoints", 4), "the save finished before the kill: not mid-save"
    assert [n for n in _checkpoints(b) if n.startswith("step_")] == ["step_000002"]
    assert _last_step(b) == 4  # the metrics of step 4 were logged before its save

    # A: killed between checkpoints, with step 3 or later logged past step_000002
    _wait_for([proc_a], lambda: _last_step(a) >= 3, "run A logging step 3")
    _kill(proc_a)
    saved_a = [n for n in _checkpoints(a) if n.startswith("step_")]
    assert saved_a and _last_step(a) < 10

    resumed_a, resumed_b = start_train(config, a, "--resume"), start_train(config, b, "--resume")
    reference = tmp_path / "reference"
    train(str(config), [], output_dir=str(reference))  # meanwhile, in this process
    log_a, log_b = _finish(resumed_a, a), _finish(resumed_b, b)
    assert f"checkpoints/{saved_a[-1]} (step" in log_a
    assert "checkpoints/step_000002 (step 2)" in log_b  # not the half-written step 4
    assert not _saving(b / "checkpoints", 4)  # cleaned away

    ref_rows, ref_weights = read_run(reference)
    assert [r["step"] for r in ref_rows] == list(range(1, 11))
    for run_dir in (a, b):
        rows, weights = read_run(run_dir)
        assert rows == ref_rows, run_dir.name
        assert weights.keys() == ref_weights.keys()
        for name in weights:
            assert (weights[name] == ref_weights[name]).all(), (run_dir.name, name)
