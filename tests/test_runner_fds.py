"""The suite under pytest-xdist: a test cannot take the worker's channel to the controller
(``support_runner_fds``). Before, a test that put a pipe on fd 3 for a moment failed 1 parallel run
in 3 with ``INTERNALERROR ... assert not crashitem`` (the worker's reader died on the next message)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("xdist")
TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from support_runner_fds import pytest_sessionstart, pytest_sessionfinish  # the suite's own hooks
"""

TAKES_FD_3 = """
import os, time

def test_a_test_that_puts_a_pipe_on_fd_3():
    r, w = os.pipe()
    saved = os.dup(3)
    try:
        os.dup2(w, 3)
        time.sleep(0.5)  # the controller's next message arrives meanwhile
        os.dup2(saved, 3)
    finally:
        for fd in (saved, r, w):
            os.close(fd)

def test_a_test_that_closes_fd_4():
    os.close(4)

def test_a_test_that_closes_a_range_over_the_channel():
    os.closerange(3, 5)

def test_a_forked_child_may_use_any_descriptor():
    pid = os.fork()
    if pid == 0:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 3)
            os.dup2(null, 4)
            os.close(3)
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_a_test_cannot_replace_or_close_the_xdist_workers_channel(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_takes_fd_3.py").write_text(textwrap.dedent(TAKES_FD_3))
    for n in range(3):  # more files: the controller keeps sending the worker work while it runs
        (tmp_path / f"test_more_{n}.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "1", "--dist", "loadfile", "-p", "no:cacheprovider",
                          "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    text = out.stdout + out.stderr
    assert "INTERNALERROR" not in text, text
    assert "3 failed, 7 passed" in text, text
    assert text.count("is the test runner's") >= 2, text
    assert "os.dup2(" in text and ", 3): fd 3 is the test runner's" in text, text
    assert "os.close(4): fd 4 is the test runner's" in text, text
    assert "os.closerange(3, 5): fd 3 is the test runner's" in text, text


SERIAL = """
import os, stat, pytest
from support_runner_fds import RunnerDescriptorError

def runner_pipes():
    pipes = []
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                pipes.append(fd)
        except OSError:  # the listing's own descriptor
            pass
    return pipes

def test_a_runner_pipe_cannot_be_replaced_in_a_serial_run():
    theirs = runner_pipes()  # pytest's saved copies of the piped stdout / stderr
    assert theirs
    r, w = os.pipe()
    with pytest.raises(RunnerDescriptorError):
        os.dup2(w, theirs[0])
    os.close(r), os.close(w)  # a test's own pipe closes as ever

def test_a_tests_own_pipes_and_subprocesses_are_its_own():
    import subprocess, sys
    for _ in range(20):
        r, w = os.pipe()
        os.dup2(r, w)
        os.close(r), os.close(w)
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\\n"
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_the_guard_works_in_a_serial_run_too(tmp_path):
    """``-n 0`` (no worker channel): the pipes open at the session's start are pytest's own copies of
    a piped stdout / stderr, and they are guarded; a test's own pipes are not."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_serial.py").write_text(textwrap.dedent(SERIAL))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-c", os.devnull,
                          "--rootdir", str(tmp_path), str(tmp_path)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert "2 passed" in out.stdout + out.stderr, out.stdout + out.stderr
