"""A full disk in the middle of writing a run's files leaves the previous file whole.

``config.yaml`` was written in place: a disk that filled up half-way left a cut file that still
parsed, and ``--resume`` then ran with settings silently back at their defaults. The disk is
filled for real here: a child process whose file-size limit (``RLIMIT_FSIZE``) is below the new
file's size, so its write fails half-way with ``EFBIG`` as it would with ``ENOSPC``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from steadyrl.config import load_config, save_config
from steadyrl.files import atomic_write_text

REPO = Path(__file__).resolve().parents[2]
LIMIT = 1500  # bytes any one file may reach in the child


def write_on_a_full_disk(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a child that cannot grow a file past ``LIMIT`` bytes."""
    preamble = textwrap.dedent(f"""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", preamble + textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_the_helper_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "summary.json"
    atomic_write_text(path, "old\n")
    done = write_on_a_full_disk(f"""
        from steadyrl.files import atomic_write_text
        atomic_write_text({str(path)!r}, "x" * {4 * LIMIT})
    """)
    assert done.returncode != 0 and "File too large" in done.stderr
    assert path.read_text() == "old\n" and _files(tmp_path) == ["summary.json"]


def test_config_yaml_is_the_old_one_after_a_full_disk(tmp_path):
    path = tmp_path / "config.yaml"
    old = load_config(None, ["optim.lr=0.25", "trainer.seed=11"])
    save_config(old, path)
    before = path.read_bytes()
    assert len(before) > LIMIT  # the new file cannot be written whole
    done = write_on_a_full_disk(f"""
        from steadyrl.config import load_config, save_config
        save_config(load_config(None, ["optim.lr=0.5", "trainer.seed=12"]), {str(path)!r})
    """)
    assert done.returncode != 0 and "File too large" in done.stderr
    assert path.read_bytes() == before and _files(tmp_path) == ["config.yaml"]
    assert load_config(path).optim.lr == 0.25


def test_tracking_json_is_the_old_one_after_a_full_disk(tmp_path):
    from steadyrl.tracking import Tracker

    with Tracker(tmp_path, run_name="first", project="p"):
        pass
    before = (tmp_path / "tracking.json").read_bytes()
    done = write_on_a_full_disk(f"""
        from steadyrl.tracking import Tracker
        Tracker({str(tmp_path)!r}, run_name="n" * {2 * LIMIT}, project="p", resume_step=0)
    """)
    assert done.returncode != 0 and "File too large" in done.stderr
    assert (tmp_path / "tracking.json").read_bytes() == before
    assert json.loads(before)["run_name"] == "first"
    assert not [n for n in _files(tmp_path) if ".tmp" in n]


@pytest.mark.parametrize("module", ["steadyrl/run/report.py", "steadyrl/run/directory.py",
                                    "steadyrl/config/loading.py", "steadyrl/tracking/tracker.py"])
def test_no_run_file_is_written_in_place(module):
    """summary.json, config.yaml, tracking.json and the marker all go through the atomic helper."""
    source = (REPO / module).read_text()
    assert ".write_text(" not in source and ".write_bytes(" not in source
