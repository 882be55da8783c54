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


SIGNAL_DURING_THE_FORK = """
import signal, time
# Python's own SIGINT handler, whatever this process inherited: a test runner started in the background
# by a non-interactive shell (nohup, `cmd &`) has SIGINT ignored, and then no KeyboardInterrupt exists
signal.signal(signal.SIGINT, signal.default_int_handler)
real, made = os.fork, []

def fork():  # the trainer's SIGINT arrives while every signal is blocked across the fork
    pid = real()
    if pid:
        made.append(pid)
        os.kill(os.getpid(), signal.SIGINT)
    return pid

def left_running(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    os.kill(pid, signal.SIGKILL), os.waitpid(pid, 0)
    return True

os.fork = fork
try:
    say("returned", FORK())
except KeyboardInterrupt:
    say("interrupted", "left-running" if left_running(made[0]) else "reaped")
say("mask", sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
"""


@pytest.mark.parametrize("fork", ["fork_child(time.sleep, 60)", "contained_eval('[1] * 3')"])
def test_a_signal_during_the_fork_raises_in_the_parent_and_leaves_no_child(fork):
    """A SIGINT held across the fork runs its handler as the mask is restored, after the child was
    made: the ``KeyboardInterrupt`` still reaches the caller, and the child, whose pid the caller
    never gets, is killed and reaped (at d175cfe it was left running: a keeper nobody knew of)."""
    lines = run_user("from steadyrl.sandbox.forking import fork_child\n"
                     "from steadyrl.rewards.contained_verdict import contained_eval\n"
                     + SIGNAL_DURING_THE_FORK.replace("FORK()", fork))
    parent = only_the_parent(lines)
    assert [parent, "interrupted", "reaped"] in lines and [parent, "mask", "[]"] in lines, lines


def test_a_fork_that_fails_restores_the_mask_and_leaks_no_descriptor():
    """``fork()`` failing (``EAGAIN`` under ``RLIMIT_NPROC``), in the main thread or another: the
    ``OSError`` reaches the caller, the thread's signal mask is as it was and a contained ``eval``
    keeps none of its pipe's descriptors (at d175cfe it kept both, each time)."""
    lines = run_user("""
        import errno, signal, threading
        from steadyrl.sandbox.forking import fork_child
        from steadyrl.rewards.contained_verdict import contained_eval

        def no_fork():
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

        def attempt(where):
            for name, call in (("fork_child", lambda: fork_child(print)), ("eval", lambda: contained_eval("1"))):
                fds = len(os.listdir("/proc/self/fd"))
                try:
                    call()
                except OSError as err:
                    say(where, name, errno.errorcode[err.errno], len(os.listdir("/proc/self/fd")) - fds,
                        sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])))

        os.fork = no_fork
        attempt("main")
        thread = threading.Thread(target=attempt, args=("thread",))
        thread.start(), thread.join()
    """)
    parent = only_the_parent(lines)
    for where in ("main", "thread"):
        for name in ("fork_child", "eval"):
            assert [parent, where, name, "EAGAIN", "0", "[]"] in lines, lines
