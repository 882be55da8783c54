"""SIGTERM (preemption) stops ``steadyrl train`` as Ctrl-C does, after saving the step it was on
(issue 33, item 9): it ended the run with no checkpoint and no hint before."""

from __future__ import annotations

import os
import signal
import time

import pytest

from steadyrl.tracking import read_jsonl


def _last_step(run_dir) -> int:
    try:
        rows = read_jsonl(run_dir / "metrics.jsonl")
    except FileNotFoundError:
        return 0
    return int(rows[-1]["step"]) if rows else 0


@pytest.mark.slow
def test_sigterm_mid_run_saves_the_step_and_prints_the_resume_command(fault_config, start_train, tmp_path):
    config = fault_config(trainer={"max_steps": 500, "save_every": 0})
    run = tmp_path / "run"
    proc = start_train(config, run)
    end = time.monotonic() + 300  # a hang guard: the loop ends once step 2 is logged
    while _last_step(run) < 2:
        assert proc.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
        assert time.monotonic() < end, "the run never logged step 2"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=300) == 130
    log = (tmp_path / "run.log").read_text()
    stopped = _last_step(run)
    saved = sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step_"))
    assert saved == [f"step_{stopped:06d}"] and 2 <= stopped < 500  # the step it was on, saved
    assert "SIGTERM: finishing this step, saving a checkpoint" in log
    assert f"steadyrl: interrupted; to continue from its newest checkpoint ({run / 'checkpoints' / saved[0]})" in log
    assert f"steadyrl train --output-dir {run} --resume" in log
