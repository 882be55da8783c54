"""Calling a reward function on a batch under a time limit, sample by sample.

A reward function is arbitrary user code: it may raise, hang (a regex with catastrophic
backtracking, sympy on a pathological expression, a network call), call ``sys.exit``, print
megabytes, start processes or signal its parent. Python cannot stop a running thread, so there are
three isolations, chosen per reward function:

* ``"process"`` (the default on Linux): the function runs in a :class:`steadyrl.sandbox.Sandbox`,
  a persistent worker started the first time it is scored. A function :func:`load_reward` made
  (a config's reward) gets a *fresh* worker that loads it again from its spec and resolved
  options (:func:`worker_target`): it holds no other reward's secrets nor anything else of the
  trainer's memory. A function handed in as a Python object is inherited by a *forked* worker
  (closures, lambdas: code the user trusts like the trainer itself). Each batch goes to it
  pickled; the scores come back as JSON (never unpickled by the trainer), read under the time
  limit. On time-out the worker and everything it started are killed (SIGKILL; the function runs
  in a pid namespace of its own, which ends with it) and a new one is started on the next call.
  The worker also dies with the trainer, keeps the function's output to itself (its tail is quoted
  in failure messages), runs without the trainer's open files or its credential-like environment
  variables, and under resource limits (``Limits``: memory, CPU seconds, processes, file size).
  Costs: a fresh worker's start (an interpreter and the function's imports, ~0.1-0.3 s) or a
  fork's page-table copy, paid once per function and after each time-out, not per batch; state
  the function keeps lives in the worker; a worker cannot use the trainer's CUDA context (a
  reward *model* on the GPU wants ``"thread"`` or ``"inline"``); the columns must be picklable.
* ``"thread"`` (the default where there is no ``fork``): the call runs in a daemon thread; on
  time-out its result is abandoned. A thread cannot be stopped: C code (sympy's big-integer
  arithmetic, a regex) runs on to its end, holding a core and its memory; the time-out message
  says how many such calls are still running. Between chunks the thread checks whether it was
  abandoned and stops there.
* ``"inline"``: the call runs in the caller's thread, with no time limit (for debugging with a
  breakpoint, or for cheap functions that share state with the trainer).

The function is called on *chunks* of ``chunk_size`` samples (default 1: one call per sample;
``None``: the whole batch in one call) and each chunk's scores are kept as they come, so a time-out
or a crash fails only the samples not yet scored. A function's scores for a chunk must therefore
not depend on the other samples of the batch; one that needs the whole batch (ranks within a
group, a batched model) sets ``chunk_size: null``. In every isolation an exception (or
``sys.exit``) becomes a failure of its chunk's samples, with its traceback; nothing the function
does propagates to the caller.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pickle
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigError
from ..metrics import Count
from ..sandbox import Limits, Rebuild, Sandbox, SandboxUnavailable, output_note
from .isolation import ISOLATIONS, Isolation, default_isolation  # noqa: F401 - re-exported

__all__ = ["Isolation", "ISOLATIONS", "Outcome", "call_reward", "default_isolation", "make_runner",
           "score_chunks", "DEFAULT_CHUNK_SIZE"]

DEFAULT_CHUNK_SIZE: int | None = 1
"""Samples per call of a reward function (``None``: the whole batch in one call)."""


@dataclass(frozen=True)
class Outcome:
    """What one batch produced. ``scores[i]`` is the function's score of sample ``i`` (``None`` where
    it gave none) and ``failed[i]`` ``None`` where the function answered for sample ``i``, else the
    failure kind of its call (``"exception"`` / ``"timeout"``). ``status`` is ``"ok"`` when every
    sample was answered, else the worst kind; ``error`` the first traceback or time-out message."""

    status: Literal["ok", "exception", "timeout"]
    scores: list | None
    error: str | None
    elapsed_s: float
    failed: list | None = None
    metrics: dict | None = None  # process isolation: what the worker's copy of the function's metrics() said
    metric_counts: list | None = None  # ... and which of its keys it reported as counts (unchecked: a worker's word)

    def per_sample(self, size: int) -> tuple[list, list]:
        """``(scores, failed)``, each of length ``size``."""
        if self.failed is not None and self.scores is not None:
            return list(self.scores), list(self.failed)
        if self.status == "ok" and self.scores is not None:
            return list(self.scores), [None] * size
        return [None] * size, [self.status] * size


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


def score_chunks(fn, prompts: list, completions: list, columns: dict, chunk_size: int | None,
                 cancel: threading.Event | None = None):
    """Yield one plain-data part per chunk: ``{"start", "stop", "status", "scores" | "error"}``."""
    size = len(completions)
    step = size if chunk_size is None else chunk_size
    for start in range(0, size, max(step, 1)):
        if cancel is not None and cancel.is_set():
            return
        stop = min(size, start + step)
        chunk = {k: v[start:stop] for k, v in columns.items()}
        status, payload = call_reward(fn, prompts[start:stop], completions[start:stop], chunk)
        yield {"start": start, "stop": stop, "status": status, "scores" if status == "ok" else "error": payload}


def _number(x) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"a score is a {type(x).__name__}")
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def _chunk_error(part, size: int, whole: bool) -> tuple[int, int, str | None, list | None]:
    """``(start, stop, error, scores)`` of one part, checked: it may come from a hostile worker."""
    start, stop = part.get("start"), part.get("stop")
    if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= size):
        raise ValueError(f"a part covers samples {start!r}..{stop!r} of a batch of {size}")
    if part.get("status") != "ok":
        return start, stop, str(part.get("error")), None
    scores = part.get("scores")
    if not isinstance(scores, list):
        raise ValueError(f"a part's scores are a {type(scores).__name__}")
    if len(scores) != stop - start:
        where = f"a batch of {size} (the whole batch is invalid)" if whole else f"a chunk of {stop - start} samples"
        return start, stop, f"returned {len(scores)} scores for {where}", None
    return start, stop, None, [_number(x) for x in scores]


def collect(parts: list, size: int, chunk_size: int | None, end: str, end_error: str | None,
            elapsed: float) -> Outcome:
    """The outcome of a batch from the parts that arrived; samples no part covers fail as ``end``
    (``"ok"`` when the call ended normally: then none are missing)."""
    scores, failed, errors = [None] * size, [end if end != "ok" else "exception"] * size, []
    whole = chunk_size is None or chunk_size >= size
    for part in parts:
        try:
            start, stop, error, values = _chunk_error(part, size, whole)
        except (ValueError, TypeError, AttributeError) as err:
            errors.append(f"the worker sent a malformed reply ({err})")
            continue
        if error is not None:
            errors.append(error)
            failed[start:stop] = ["exception"] * (stop - start)
            continue
        scores[start:stop], failed[start:stop] = values, [None] * (stop - start)
    done = sum(f is None for f in failed)
    if end_error is not None:
        note = f" ({done} of {size} samples were scored before)" if done and end != "ok" else ""
        errors.insert(0, end_error + note)
    if done == size:
        return Outcome("ok", scores, None, elapsed, failed)
    status = "timeout" if "timeout" in failed else "exception"
    if not errors:
        errors.append(f"{size - done} of {size} samples got no score (the call ended early)")
    return Outcome(status, scores, errors[0], elapsed, failed)


class _Done:
    def __init__(self, outcome: Outcome):
        self.outcome = outcome

    def wait(self, timeout_s: float | None) -> Outcome:
        return self.outcome


# --- inline ---------------------------------------------------------------------------------------
class InlineRunner:
    def __init__(self, fn, chunk_size: int | None = DEFAULT_CHUNK_SIZE):
        self.fn, self.chunk_size = fn, chunk_size

    def start(self, prompts, completions, columns) -> _Done:
        t0 = time.perf_counter()
        parts = list(score_chunks(self.fn, prompts, completions, columns, self.chunk_size))
        return _Done(collect(parts, len(completions), self.chunk_size, "ok", None, time.perf_counter() - t0))

    def close(self) -> None:
        pass


# --- thread ---------------------------------------------------------------------------------------
class ThreadRunner:
    def __init__(self, fn, chunk_size: int | None = DEFAULT_CHUNK_SIZE):
        self.fn, self.chunk_size = fn, chunk_size
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
        self.runner, self.parts, self.size = runner, [], len(args[1])
        self.cancel, self.finished = threading.Event(), []
        self.thread = threading.Thread(target=self._run, args=args, daemon=True, name="steadyrl-reward")
        self.t0 = time.perf_counter()
        self.thread.start()

    def _run(self, prompts, completions, columns) -> None:
        for part in score_chunks(self.runner.fn, prompts, completions, columns, self.runner.chunk_size, self.cancel):
            self.parts.append(part)
        self.finished.append(True)

    def wait(self, timeout_s: float | None) -> Outcome:
        remaining = None if timeout_s is None else max(0.0, self.t0 + timeout_s - time.perf_counter())
        self.thread.join(remaining)
        elapsed, parts = time.perf_counter() - self.t0, list(self.parts)
        if self.thread.is_alive():
            self.cancel.set()  # it stops after its current chunk, if that ever ends
            self.runner.abandoned.append(self.thread)
            return collect(parts, self.size, self.runner.chunk_size, "timeout",
                           f"timed out after {timeout_s:g} s (isolation='thread': a thread cannot be stopped, "
                           "and C code such as sympy's runs on to its end in the background; "
                           f"{self.runner.still_running()} such call(s) still running)", elapsed)
        if not self.finished:
            return collect(parts, self.size, self.runner.chunk_size, "exception",
                           "the call ended without a result (KeyboardInterrupt?)", elapsed)
        return collect(parts, self.size, self.runner.chunk_size, "ok", None, elapsed)


# --- process --------------------------------------------------------------------------------------
def _serve_batch(fn, request):
    """The sandbox's target: score a batch chunk by chunk, streaming each chunk's part."""
    prompts, completions, columns, chunk_size = request
    yield from score_chunks(fn, prompts, completions, columns, chunk_size)
    report = getattr(getattr(fn, "fn", fn), "metrics", None)  # the worker's object is the one that scored
    if callable(report):
        try:
            values = list(report().items())[:64]
            yield {"metrics": {str(k)[:100]: float(v) for k, v in values},
                   "counts": [str(k)[:100] for k, v in values if isinstance(v, Count)]}  # declared by the reporter
        except Exception:  # noqa: BLE001 - a metrics report never fails a batch
            pass


def _reward_server(spec: str, options: dict):
    """A fresh worker's target: the reward ``spec`` loaded again, planned, serving batches."""
    from .calling import PlannedReward
    from .loader import reload_reward

    return functools.partial(_serve_batch, PlannedReward.of(reload_reward(spec, options)))


def worker_target(fn):
    """The sandbox target for ``fn`` (a :class:`~steadyrl.rewards.calling.PlannedReward` or a plain
    function): a :class:`Rebuild` - a fresh worker that loads the function again from its spec -
    when :func:`~steadyrl.rewards.loader.load_reward` made it; else ``fn`` itself, forked (a
    callable handed in as a Python object exists only in the trainer's memory; one that places a
    model on the trainer's device is forked too, as it was placed)."""
    from .loader import RECIPE_ATTR

    recipe = getattr(getattr(fn, "fn", fn), RECIPE_ATTR, None)
    if recipe is None or hasattr(getattr(fn, "fn", fn), "use_device"):
        return functools.partial(_serve_batch, fn)
    target = Rebuild(_reward_server, *recipe)
    try:
        pickle.dumps(target, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an option that is a Python object (a tokenizer): forked
        return functools.partial(_serve_batch, fn)
    return target


class ProcessRunner:
    def __init__(self, fn, chunk_size: int | None = DEFAULT_CHUNK_SIZE, limits: Limits | None = None,
                 env_passthrough=()):
        self.fn, self.chunk_size = fn, chunk_size
        self.box = Sandbox(worker_target(fn), limits=limits, env_passthrough=env_passthrough)

    def start(self, prompts, completions, columns):
        try:
            call = self.box.submit((prompts, completions, columns, self.chunk_size))
        except SandboxUnavailable as err:
            return _Done(Outcome("exception", None, str(err), 0.0))
        except Exception as err:  # noqa: BLE001 - pickling the batch failed; the worker is unharmed
            return _Done(Outcome(
                "exception", None,
                f"cannot send the batch to the worker process ({type(err).__name__}: {err}); "
                "with isolation='process' every column must be picklable",
                0.0,
            ))
        return _ProcessCall(self, call, len(completions))

    def discard(self) -> None:
        """Kill the worker (a new one is forked on the next call)."""
        self.box.kill()

    def close(self) -> None:
        self.box.close()


class _ProcessCall:
    def __init__(self, runner: ProcessRunner, call, size: int):
        self.runner, self.call, self.size = runner, call, size

    def wait(self, timeout_s: float | None) -> Outcome:
        reply = self.call.wait(timeout_s)
        end = {"ok": "ok", "timeout": "timeout"}.get(reply.status, "exception")
        error = None if reply.status == "ok" else reply.error
        if reply.status == "error":  # the sandbox's own target failed, not the user's function
            error = f"the worker failed: {reply.error}"
        parts = [p for p in reply.parts if not (isinstance(p, dict) and "metrics" in p)]
        reported = [p for p in reply.parts if isinstance(p, dict) and "metrics" in p]
        outcome = collect(parts, self.size, self.runner.chunk_size, end, error, reply.elapsed_s)
        if reported and isinstance(reported[-1]["metrics"], dict):
            outcome = dataclasses.replace(outcome, metrics=reported[-1]["metrics"],
                                          metric_counts=reported[-1].get("counts"))
        if outcome.error is not None and reply.status in ("ok", "error") and reply.output:
            error = outcome.error + output_note(reply.output, reply.output_bytes)
            outcome = dataclasses.replace(outcome, error=error)
        return outcome


def make_runner(fn, isolation: Isolation, *, chunk_size: int | None = DEFAULT_CHUNK_SIZE,
                limits: Limits | None = None, env_passthrough=()):
    """The runner for ``fn``: ``.start(prompts, completions, columns).wait(timeout_s) -> Outcome``."""
    if isolation == "process":
        try:
            return ProcessRunner(fn, chunk_size, limits, env_passthrough)
        except SandboxUnavailable as err:
            raise ConfigError(f"isolation='process' is not available here ({err}); use 'thread' or 'inline'") from None
    if isolation == "thread":
        return ThreadRunner(fn, chunk_size)
    if isolation == "inline":
        return InlineRunner(fn, chunk_size)
    raise ValueError(f"isolation must be one of {list(ISOLATIONS)}, got {isolation!r}")
