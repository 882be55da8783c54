"""``steadyrl.files``: the one place run files are written and read, never through a link (issue
30, item 7). The commands' tests are in tests/doctor/test_hostile_run_files.py,
tests/cli/test_run_dir_links.py and tests/cli/test_export_links.py."""

from __future__ import annotations

import os

import pytest

from steadyrl.errors import ConfigError
from steadyrl.files import atomic_write_text, read_bytes_nofollow


def test_atomic_write_refuses_a_link_and_leaves_its_target(tmp_path):
    target = tmp_path / "authorized_keys"
    target.write_text("mine\n")
    (tmp_path / "report.md").symlink_to(target)
    with pytest.raises(ConfigError, match="report.md.*symbolic link"):
        atomic_write_text(tmp_path / "report.md", "pwned\n")
    assert target.read_text() == "mine\n" and (tmp_path / "report.md").is_symlink()


def test_a_link_planted_at_the_temporary_name_is_not_written_through(tmp_path):
    target = tmp_path / "victim"
    target.write_text("mine\n")
    (tmp_path / f".summary.json.tmp-{os.getpid()}").symlink_to(target)
    atomic_write_text(tmp_path / "summary.json", "{}\n")
    assert target.read_text() == "mine\n" and (tmp_path / "summary.json").read_text() == "{}\n"


def test_reading_refuses_a_link_and_a_fifo(tmp_path):
    (tmp_path / "secret").write_text("s")
    (tmp_path / "metrics.jsonl").symlink_to(tmp_path / "secret")
    with pytest.raises(ConfigError, match="symbolic link"):
        read_bytes_nofollow(tmp_path / "metrics.jsonl")
    os.mkfifo(tmp_path / "samples.jsonl")  # would block a plain open() for ever
    with pytest.raises(ConfigError, match="not a regular file"):
        read_bytes_nofollow(tmp_path / "samples.jsonl")
    with pytest.raises(FileNotFoundError):
        read_bytes_nofollow(tmp_path / "missing")
