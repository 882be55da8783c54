"""A child the library forks inside its user's process never runs the user's code on: whatever
fails in it, before its own guard or after, it ends in ``os._exit`` (no ``atexit`` function, no
buffered output written twice, nothing sent on the parent's descriptors). Each case runs in an
interpreter of its own, which plays the user: at 694169d a failure in the forked keeper before its
guard returned into the caller's stack and the copy went on with the user's program.
(``steadyrl/sandbox/forking.py``, ``steadyrl/rewards/contained_verdict.py``, ``harness_calls``.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, /proc")
REPO = str(Path(__file__).resolve().parents[2])

USER = """
import atexit, os, sys
me = os.getpid()
atexit.register(lambda: os.write(1, f"atexit {os.getpid()}\\n".encode()))
sys.stdout.write("buffered before the fork\\n")  # not flushed: a child that flushed it would say it twice

def say(*words):
    os.write(1, (" ".join(map(str, (os.getpid(), *words))) + "\\n").encode())
"""


def run_user(body: str) -> list[list[str]]:
    """Run the user's program; its lines, split (each starts with the pid that wrote it, but the
    buffered line and the ``atexit`` lines, which name it)."""
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "PYTHONPATH": REPO}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(USER) + textwrap.dedent(body)], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return [line.split() for line in out.stdout.splitlines()]


def only_the_parent(lines: list[list[str]]) -> str:
    """The one pid that wrote every pid-led line and ran ``atexit`` (once); the buffered line once."""
    assert sum(words == ["buffered", "before", "the", "fork"] for words in lines) == 1, lines
    atexits = [words[1] for words in lines if words[0] == "atexit"]
    pids = {words[0] for words in lines if words[0].isdigit()}
    assert len(atexits) == 1 and pids == set(atexits), lines
    return atexits[0]


def test_a_keeper_that_fails_before_its_guard_never_runs_the_callers_code():
    lines = run_user("""
        from steadyrl.sandbox import Sandbox, sandbox as sb

        def keeper_that_fails(*args):
            raise RuntimeError("failed before the keeper's guard")

        sb.keeper_main = keeper_that_fails
        box = Sandbox(lambda request: request)
        try:
            say("reply", box.call(1, timeout_s=20).status)
        except BaseException as err:
            say("raised", type(err).__name__)
        box.close()
        say("done")
    """)
    parent = only_the_parent(lines)
    assert [parent, "reply", "died"] in lines and [parent, "done"] in lines, lines


def test_fork_child_ends_in_os_exit_whatever_its_body_does():
    lines = run_user("""
        import signal, sys
        from steadyrl.sandbox.forking import fork_child, FAILED

        def raises():
            raise KeyboardInterrupt

        def exits():
            sys.exit(0)

        def returns():
            return "back"

        for body in (raises, exits, returns):
            pid = fork_child(body)
            say(body.__name__, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        say("failed-is", FAILED)
        say("mask", sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
    """)
    parent = only_the_parent(lines)
    failed = next(words[2] for words in lines if words[1:2] == ["failed-is"])
    assert [parent, "raises", failed] in lines and [parent, "exits", failed] in lines, lines
    assert [parent, "returns", "0"] in lines and [parent, "mask", "[]"] in lines, lines


def test_a_contained_eval_whose_fork_fails_before_its_guard_never_returns():
    lines = run_user("""
        from steadyrl.rewards import contained_verdict as cv

        def fails_first(*args):
            raise RuntimeError("failed before the fork's guard")

        cv._in_fork = fails_first
        try:
            say("value", cv.contained_eval("1 + 1"))
        except BaseException as err:
            say("raised", type(err).__name__)
    """)
    parent = only_the_parent(lines)
    assert [parent, "raised", "ValueError"] in lines, lines


def test_a_program_whose_error_handling_raises_never_returns_into_the_harness():
    """The program's own ``sys.stderr`` raises inside the harness's ``traceback.print_exc``: the
    child ends with status 1, never in the harness's loop."""
    lines = run_user("""
        from steadyrl.sandbox.harness_calls import run_program

        SOURCE = "\\n".join([
            "import sys",
            "class Raises:",
            "    def write(self, text):",
            "        raise RuntimeError('no')",
            "    def flush(self):",
            "        pass",
            "sys.stderr = Raises()",
            "raise ValueError('the error of the program')"])
        pid = os.fork()
        if pid == 0:
            run_program({"source": SOURCE, "mode": "stdio"})
            say("the harness's loop went on in the child")
            os._exit(0)
        say("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """)
    parent = only_the_parent(lines)
    assert [parent, "child", "1"] in lines, lines
