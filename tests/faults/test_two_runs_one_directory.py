"""Two ``steadyrl train`` on one run directory at once would interleave their checkpoints and
logs: the second stops at once (exit 2), naming the directory and the first one's PID. The lock
goes with the process, however it ends: after a ``kill -9`` the run can be resumed."""

from __future__ import annotations

import os
import signal
import time

from steadyrl import cli
from steadyrl.run.directory import LOCK


def _wait_for_lock(path, pid: int, proc, deadline_s: float = 120) -> None:
    end = time.time() + deadline_s
    while time.time() < end:
        assert proc.poll() is None, "the first run ended early"
        if path.exists() and path.read_text().strip() == str(pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never held PID {pid}")


def test_a_second_run_stops_naming_the_first_and_a_killed_run_frees_the_directory(fault_config, start_train,
                                                                                  tmp_path, capsys):
    config = fault_config(trainer={"max_steps": 100_000, "save_every": 1})
    out = tmp_path / "run"
    first = start_train(config, out)
    _wait_for_lock(out / LOCK, first.pid, first)
    while not (out / "checkpoints").is_dir() or not any((out / "checkpoints").glob("step_*")):
        assert first.poll() is None
        time.sleep(0.05)
    for argv in (["--resume"], ["--overwrite"], []):
        code = cli.main(["train", str(config), "--output-dir", str(out), *argv])
        err = capsys.readouterr().err
        assert code == 2, err
        assert str(out) in err and f"PID {first.pid}" in err and len(err.strip().splitlines()) == 1, err
    assert first.poll() is None  # the first run goes on
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    steps = sorted(int(p.name.removeprefix("step_")) for p in (out / "checkpoints").glob("step_*"))
    assert cli.main(["train", str(config), "--output-dir", str(out), "--resume",
                     f"trainer.max_steps={steps[-1] + 1}"]) == 0
