"""Which worker a target gets: a :class:`Rebuild` (every reward, tool and environment named by a
spec) a fresh interpreter that rebuilds it; a Python object a fork of the trainer."""

from __future__ import annotations

import os
import sys

import pytest

from steadyrl.rewards.loader import load_reward
from steadyrl.rewards.runners import ProcessRunner
from steadyrl.sandbox import Rebuild, Sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process isolation needs Linux")

REWARD = """
import os

def pid_reward(prompts, completions, scale=1.0):
    return [float(os.getpid()) * scale]
"""


def _isolation(runner: ProcessRunner) -> str:
    outcome = runner.start(["p"], ["c"], {}).wait(30)
    assert outcome.status == "ok", outcome.error
    return runner.box.isolation


def test_a_reward_named_by_a_spec_gets_a_fresh_worker_and_an_object_a_forked_one(tmp_path):
    (tmp_path / "r.py").write_text(REWARD)
    spec = f"{tmp_path / 'r.py'}:pid_reward"
    runners = [ProcessRunner(load_reward(spec, scale=1.0)), ProcessRunner(lambda p, c: [1.0])]
    try:
        fresh, forked = (_isolation(r) for r in runners)
    finally:
        for r in runners:
            r.close()
    assert fresh.split(",")[0] == "fresh" and forked.split(",")[0] == "forked"
    if os.geteuid() == 0:  # root always gets the namespaces (measured where the tests run)
        assert fresh == "fresh,pid,proc" and forked == "forked,pid,proc"


def test_a_reward_with_an_option_that_cannot_be_pickled_is_forked(tmp_path):
    (tmp_path / "r.py").write_text(REWARD)
    runner = ProcessRunner(load_reward(f"{tmp_path / 'r.py'}:pid_reward", scale=_Scale()))
    try:
        assert _isolation(runner).startswith("forked")
    finally:
        runner.close()


class _Scale(float):
    def __new__(cls):
        return super().__new__(cls, 1.0)

    def __reduce__(self):
        raise TypeError("not picklable")


def _broken_factory():
    raise ImportError("no module named 'the_reward'")


def test_a_recipe_that_cannot_be_rebuilt_fails_every_call_with_its_traceback():
    with Sandbox(Rebuild(_broken_factory)) as box:
        for _ in range(2):
            reply = box.call("x", timeout_s=30)
            assert reply.status == "error"
            assert "could not rebuild its target" in reply.error and "no module named 'the_reward'" in reply.error


def _slow_factory(seconds: float):
    import time

    time.sleep(seconds)  # a tool module that imports torch, on a loaded machine
    return _echo


def _echo(request):
    return request


def test_a_fresh_workers_start_is_not_counted_in_its_first_calls_time_limit():
    """A target that takes 2 s to rebuild, called with a 1 s limit: before the grace every call
    timed out, killed the worker, and the next call started another (the tool demo ran at 60 s a
    step, its calls cut by the turn's time budget). Later calls get the limit alone."""
    with Sandbox(Rebuild(_slow_factory, 2.0)) as box:
        first = box.call("a", timeout_s=1.0)
        assert first.status == "ok" and first.value == "a", first.error
        assert box.call("b", timeout_s=1.0).value == "b"
