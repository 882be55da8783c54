"""SIGKILL in the middle of a run and in the middle of a save, then ``--resume``: the run ends
exactly where an uninterrupted one does (same metrics, timing aside, and same weights).

``python -m steadyrl train`` runs as a real process (10 steps of the tiny model, a checkpoint
every 2 steps). Run A is killed between checkpoints; run B is killed the moment a
``.tmp-step_*`` directory appears after its first checkpoint (a save under way) - and the test
checks that the half-written directory is still there after the kill. No test hook:
the test watches the run directory. Both are resumed to the end (A and B side by side, to use
both cores) and compared with an uninterrupted run of the same config, in this process.

And a run killed before its first checkpoint: ``--resume`` starts it over, with a clean log.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from steadyrl.tracking import read_jsonl
from steadyrl.recipe import train

DEADLINE_S = 120
POLL_S = 0.0005  # a save of the tiny model lasts ~10 ms


def _kill(proc) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def _saving(checkpoints: Path, after: int = 0, pid: int | None = None) -> list[str]:
    """The ``.tmp-step_N-<pid>`` directories (saves under way) with ``N > after``, of process
    ``pid`` (default: any)."""
    try:
        names = [e.name for e in os.scandir(checkpoints) if e.name.startswith(".tmp-step_")]
    except FileNotFoundError:
        return []
    steps_pids = [n.removeprefix(".tmp-step_").split("-") for n in names]
    return [n for n, (step, owner) in zip(names, steps_pids)
            if int(step) > after and (pid is None or int(owner) == pid)]


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
    # Both runs are watched in one loop (their start-ups differ by seconds on a busy machine).
    # A: killed between checkpoints, once step 3 is logged past step_000002.
    # B: killed while a checkpoint after step_000002 is being saved. The kill lands within a
    # millisecond of the save's start and a save lasts ~10 ms; should a loaded machine let the
    # save finish first anyway, B is resumed and killed in a later save instead.
    a_killed, b_partial, b_tries = False, None, 0
    end = time.monotonic() + DEADLINE_S
    while not (a_killed and b_partial):
        assert time.monotonic() < end, "timed out waiting for the moments to kill"
        if not b_partial and (partial := _saving(b / "checkpoints", after=2, pid=proc_b.pid)):
            _kill(proc_b)
            b_tries += 1
            if set(partial) & set(_saving(b / "checkpoints")):
                b_partial = partial
            else:
                assert b_tries < 3, "no kill landed in the middle of a save in three tries"
                proc_b = start_train(config, b, "--resume")
        if not a_killed and _last_step(a) >= 3:
            _kill(proc_a)
            a_killed = True
        for proc, done in ((proc_a, a_killed), (proc_b, b_partial)):
            assert done or proc.poll() is None, f"a run ended (status {proc.returncode}) before it was killed"
        time.sleep(POLL_S)

    saved_a = [n for n in _checkpoints(a) if n.startswith("step_")]
    assert saved_a and _last_step(a) < 10
    target = int(b_partial[0].removeprefix(".tmp-step_").split("-")[0])
    resume_b_from = f"step_{target - 2:06d}"
    assert [n for n in _checkpoints(b) if n.startswith("step_")][-1] == resume_b_from  # intact
    assert _last_step(b) == target  # the metrics of the step were logged before its save

    resumed_a, resumed_b = start_train(config, a, "--resume"), start_train(config, b, "--resume")
    reference = tmp_path / "reference"
    train(str(config), [], output_dir=str(reference))  # meanwhile, in this process
    log_a, log_b = _finish(resumed_a, a), _finish(resumed_b, b)
    assert f"checkpoints/{saved_a[-1]} (step" in log_a
    resumed = [line for line in log_b.splitlines() if line.startswith("resumed from")]
    assert resumed[-1].endswith(f"checkpoints/{resume_b_from} (step {target - 2})")  # not the half-written one
    assert not _saving(b / "checkpoints")  # cleaned away

    ref_rows, ref_weights = read_run(reference)
    assert [r["step"] for r in ref_rows] == list(range(1, 11))
    for run_dir in (a, b):
        rows, weights = read_run(run_dir)
        assert rows == ref_rows, run_dir.name
        assert weights.keys() == ref_weights.keys()
        for name in weights:
            assert (weights[name] == ref_weights[name]).all(), (run_dir.name, name)


def test_killed_before_its_first_checkpoint_a_resumed_run_starts_over_with_a_clean_log(
        fault_config, read_run, tmp_path):
    """Nothing to resume from: the run starts again from step 1, and no line (or key) the
    killed run logged survives in metrics.jsonl (a last line of the same step as the first new
    one would otherwise be merged into it, stale keys and all)."""
    import json

    config = fault_config(trainer={"max_steps": 2, "save_every": 2})
    full, killed = tmp_path / "full", tmp_path / "killed"
    train(str(config), [], output_dir=str(full))
    killed.mkdir()
    stale = [{"step": 1, "reward/mean": 0.5, "batch/no_valid_sample": 1.0, "eval/accuracy": 0.5}]
    (killed / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in stale))
    (killed / "checkpoints" / ".tmp-step_000002-999999").mkdir(parents=True)  # the save it died in
    train(str(config), [], output_dir=str(killed), resume=True)
    assert read_run(killed)[0] == read_run(full)[0]
    assert [p.name for p in (killed / "checkpoints").iterdir()] == ["step_000002"]
