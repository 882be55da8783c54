"""Calling a reward function on a batch under a time limit.

A reward function is arbitrary user code: it may raise, hang (a regex with catastrophic
backtracking, sympy on a pathological expression, a network call), or call ``sys.exit``. Python
cannot stop a running thread, so there are three isolations, chosen per reward function:

* ``"process"`` (the default on Linux): the function gets one persistent *worker process*,
  forked from the trainer the first time it is scored; each batch goes over a pipe and the scores
  come back. On time-out the worker's process group is killed (SIGKILL), so the runaway code -
  and anything it spawned - really stops and its CPU and memory come back; a fresh worker is
  forked on the next call. Why fork: the worker inherits the function as it is, closures,
  lambdas and loaded modules included (nothing about the function is pickled, only the batch and
  the scores), and a fork costs one page-table copy - about 10 ms for a small process, ~0.1 s per
  few GB of resident memory - paid once per function (and after a time-out), not per batch.
  Costs: state the function keeps (a counter, a cache) lives in the worker, not in the trainer;
  a forked worker cannot use the trainer's CUDA context (a reward *model* on the GPU wants
  ``"thread"`` or ``"inline"``); the columns must be picklable.
* ``"thread"`` (the default where there is no ``fork``): the call runs in a daemon thread; on
  time-out its result is abandoned. The thread cannot be stopped and runs on in the background,
  holding whatever it holds; the time-out message says how many such calls are still running.
* ``"inline"``: the call runs in the caller's thread, with no time limit (for debugging with a
  breakpoint, or for cheap functions that share state with the trainer).

In every isolation an exception (or ``sys.exit``) in the function becomes an ``Outcome`` with its
traceback; nothing the function does propagates to the caller.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import warnings
import weakref
from dataclasses import dataclass
from typing import Literal

__all__ = ["Isolation", "ISOLATIONS", "Outcome", "call_reward", "default_isolation", "make_runner"]

Isolation = Literal["process", "thread", "inline"]
ISOLATIONS: tuple[str, ...] = ("process", "thread", "inline")

REAP_GRACE_S = 1.0
"""How long ``close`` lets an idle worker exit on its own before killing it."""


@dataclass(frozen=True)
class Outcome:
    """What one call produced: ``scores`` when ``status == "ok"``, else the ``error`` text."""

    status: Literal["ok", "exception", "timeout"]
    scores: list | None
    error: str | None
    elapsed_s: float


def default_isolation() -> Isolation:
    """``"process"`` on Linux, ``"thread"`` elsewhere (no ``fork``, or a fork-unsafe macOS)."""
    return "process" if sys.platform.startswith("linux") and hasattr(os, "fork") else "thread"


def _as_scores(out) -> list:
    """The function's output as a list of ``float | None`` (raises ``TypeError`` if it is not one)."""
    if isinstance(out, (str, bytes, dict)) or not hasattr(out, "__iter__"):
        raise TypeError(f"a reward function must return a list of scores, got {type(out).__name__}")
    scores: list = []
    for i, x in enumerate(out):
        if x is None:
            scores.append(None)
            continue
        if isinstance(x, (str, bytes)):
            raise TypeError(f"score {i} is a {type(x).__name__} ({x!r:.40}), expected a float or None")
        try:
            scores.append(float(x))
        except (TypeError, ValueError):
            raise TypeError(f"score {i} is a {type(x).__name__}, expected a float or None") from None
    return scores


def call_reward(fn, prompts: list, completions: list, columns: dict) -> tuple[str, object]:
    """``("ok", scores)`` or ``("exception", traceback text)``; never raises an ``Exception``."""
    try:
        return "ok", _as_scores(fn(prompts, completions, **columns))
    except (Exception, SystemExit) as err:
        tb = err.__traceback__.tb_next if err.__traceback__ is not None else None
        return "exception", "".join(traceback.format_exception(type(err), err, tb))


def _outcome(reply: tuple[str, object], elapsed: float) -> Outcome:
    status, payload = reply
    if status == "ok":
        return Outcome("ok", payload, None, elapsed)
    return Outcome("exception", None, str(payload), elapsed)


class _Done:
    def __init__(self, outcome: Outcome):
        self.outcome = outcome

    def wait(self, timeout_s: float | None) -> Outcome:
        return self.outcome


# --- inline ---------------------------------------------------------------------------------------
class InlineRunner:
    def __init__(self, fn):
        self.fn = fn

    def start(self, prompts, completions, columns) -> _Done:
        t0 = time.perf_counter()
        reply = call_reward(self.fn, prompts, completions, columns)
        return _Done(_outcome(reply, time.perf_counter() - t0))

    def close(self) -> None:
        pass


# --- thread ---------------------------------------------------------------------------------------
class ThreadRunner:
    def __init__(self, fn):
        self.fn = fn
        self.abandoned: list[threading.Thread] = []

    def start(self, prompts, completions, columns) -> _ThreadCall:
        return _ThreadCall(self, (prompts, completions, columns))

    def still_running(self) -> int:
        """Timed-out calls whose threads have not finished yet."""
        self.abandoned = [t for t in self.abandoned if t.is_alive()]
        return len(self.abandoned)

    def close(self) -> None:
        pass


class _ThreadCall:
    def __init__(self, runner: ThreadRunner, args: tuple):
        self.runner, self.box = runner, []
        self.thread = threading.Thread(
            target=lambda: self.box.append(call_reward(runner.fn, *args)), daemon=True, name="steadyrl-reward"
        )
        self.t0 = time.perf_counter()
        self.thread.start()

    def wait(self, timeout_s: float | None) -> Outcome:
        remaining = None if timeout_s is None else max(0.0, self.t0 + timeout_s - time.perf_counter())
        self.thread.join(remaining)
        elapsed = time.perf_counter() - self.t0
        if self.thread.is_alive():
            self.runner.abandoned.append(self.thread)
            return Outcome(
                "timeout", None,
                f"timed out after {timeout_s:g} s (isolation='thread': the call cannot be stopped and "
                f"runs on in the background; {self.runner.still_running()} such call(s) still running)",
                elapsed,
            )
        if not self.box:
            return Outcome("exception", None, "the call ended without a result (KeyboardInterrupt?)", elapsed)
        return _outcome(self.box[0], elapsed)


# --- process --------------------------------------------------------------------------------------
_LIVE_WORKERS: weakref.WeakSet = weakref.WeakSet()
"""Workers alive in this process: a newly forked worker closes its copies of their pipe ends, so
that each worker sees end-of-file, and exits, as soon as the trainer is gone."""


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream must not stop scoring
            pass


def _reset_signals() -> None:
    """In a worker: default actions for every signal the trainer handles in Python (its SIGTERM
    checkpoint handler must not run in a worker), and SIGINT ignored (the trainer handles Ctrl-C)."""
    for sig in signal.valid_signals():
        try:
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _serve(fn, conn) -> None:
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        reply = call_reward(fn, *request)
        _flush_std_streams()
        conn.send(reply)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class _Worker:
    """One forked process serving one reward function, in its own process group."""

    def __init__(self, fn):
        parent_end, child_end = multiprocessing.Pipe(duplex=True)
        _flush_std_streams()  # else buffered output would be written twice
        with warnings.catch_warnings():
            # Python >= 3.12 warns on fork in a multi-threaded process: the child runs only the
            # reward function, and a lock left held by another thread ends in a time-out, not a hang.
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                pid = os.fork()
            except OSError:
                parent_end.close()
                child_end.close()
                raise
        if pid == 0:
            self._child_main(fn, parent_end, child_end)
        try:
            os.setpgid(pid, pid)  # the child does it too: whichever runs first wins the race
        except OSError:
            pass
        child_end.close()
        self.pid, self.conn, self.reaped = pid, parent_end, False
        _LIVE_WORKERS.add(self)

    @staticmethod
    def _child_main(fn, parent_end, child_end) -> None:
        code = 1
        try:
            os.setpgid(0, 0)
            parent_end.close()
            for other in list(_LIVE_WORKERS):
                other.conn.close()
            _reset_signals()
            _serve(fn, child_end)
            code = 0
        except BaseException:  # noqa: BLE001 - report, then leave without running the trainer's code
            traceback.print_exc()
        finally:
            _flush_std_streams()
            os._exit(code)

    def kill(self) -> int | None:
        """SIGKILL the worker's process group (the worker and anything it spawned); its exit code."""
        _LIVE_WORKERS.discard(self)
        self.conn.close()
        if self.reaped:  # its pid may belong to another process by now
            return None
        for kill in (os.killpg, os.kill):  # killpg fails if the child has not set its group yet
            try:
                kill(self.pid, signal.SIGKILL)
                break
            except OSError:
                continue
        return self._reap(block=True)

    def close(self) -> None:
        """Let an idle worker exit (end-of-file on its pipe); kill it if it does not, promptly."""
        _LIVE_WORKERS.discard(self)
        self.conn.close()
        deadline = time.monotonic() + REAP_GRACE_S
        while time.monotonic() < deadline:
            self._reap(block=False)
            if self.reaped:
                return
            time.sleep(0.002)
        self.kill()

    def _reap(self, block: bool) -> int | None:
        """Collect the worker's exit status (no zombie left); ``None`` if still running or unknown."""
        if self.reaped:
            return None
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:  # already collected (e.g. SIGCHLD ignored): nothing to wait for
            self.reaped = True
            return None
        if pid == 0:
            return None
        self.reaped = True
        return os.waitstatus_to_exitcode(status)


def _close_slot(slot: list) -> None:
    if slot[0] is not None:
        worker, slot[0] = slot[0], None
        worker.close()


class ProcessRunner:
    def __init__(self, fn):
        self.fn = fn
        # The slot is shared with a finalizer that closes the worker when the runner is dropped.
        self._slot: list[_Worker | None] = [None]
        weakref.finalize(self, _close_slot, self._slot)
        self.in_flight = False  # a batch was sent and its reply not read (the caller was interrupted)

    @property
    def worker(self) -> _Worker | None:
        return self._slot[0]

    def start(self, prompts, completions, columns):
        if self.in_flight:  # a stale reply would be read as this batch's: start afresh
            self.discard()
        for _ in range(2):
            if self.worker is None:
                try:
                    self._slot[0] = _Worker(self.fn)
                except OSError as err:
                    return _Done(Outcome("exception", None, f"cannot start a worker process: {err}", 0.0))
            try:
                self.worker.conn.send((prompts, completions, columns))
                self.in_flight = True
                return _ProcessCall(self, time.perf_counter())
            except (BrokenPipeError, ConnectionError, EOFError, OSError):
                self.discard()  # the worker died between calls (e.g. the OOM killer): fork a new one
            except Exception as err:  # noqa: BLE001 - pickling the batch failed; the worker is unharmed
                return _Done(Outcome(
                    "exception", None,
                    f"cannot send the batch to the worker process ({type(err).__name__}: {err}); "
                    "with isolation='process' every column must be picklable",
                    0.0,
                ))
        return _Done(Outcome("exception", None, "the worker process dies as soon as it starts", 0.0))

    def discard(self) -> int | None:
        """Kill the worker (a new one is forked on the next call); its exit code."""
        worker, self._slot[0] = self._slot[0], None
        self.in_flight = False
        return worker.kill() if worker is not None else None

    def close(self) -> None:
        _close_slot(self._slot)


class _ProcessCall:
    def __init__(self, runner: ProcessRunner, t0: float):
        self.runner, self.t0 = runner, t0

    def wait(self, timeout_s: float | None) -> Outcome:
        worker = self.runner.worker
        remaining = None if timeout_s is None else max(0.0, self.t0 + timeout_s - time.perf_counter())
        try:
            ready = worker.conn.poll(remaining)
        except (OSError, EOFError):
            ready = True  # recv below reports it
        if not ready:
            self.runner.discard()
            return Outcome(
                "timeout", None,
                f"timed out after {timeout_s:g} s; its worker process was killed "
                "(a new one is forked for the next batch)",
                time.perf_counter() - self.t0,
            )
        try:
            reply = worker.conn.recv()
        except (EOFError, OSError):
            code = self.runner.discard()
            return Outcome(
                "exception", None,
                f"the worker process died while scoring ({_describe_exit(code)})",
                time.perf_counter() - self.t0,
            )
        self.runner.in_flight = False
        return _outcome(reply, time.perf_counter() - self.t0)


def make_runner(fn, isolation: Isolation):
    """The runner for ``fn``: ``.start(prompts, completions, columns).wait(timeout_s) -> Outcome``."""
    if isolation == "process":
        return ProcessRunner(fn)
    if isolation == "thread":
        return ThreadRunner(fn)
    if isolation == "inline":
        return InlineRunner(fn)
    raise ValueError(f"isolation must be one of {list(ISOLATIONS)}, got {isolation!r}")
