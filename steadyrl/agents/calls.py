"""Running a turn's tool and environment calls: all at once, each under a time limit.

A :class:`CallRunner` runs ``target(request)`` for a list of requests and returns, for each, a
:class:`CallResult`: ``("ok", value)``, ``("error", text)``, ``("timeout", text)`` or, when the
requests share a time budget (``budget_s``: all of them are over that long after they were
sent, whatever each one's own limit), ``("budget", text)`` for a call cut by it or never started.
Nothing a call does propagates to the caller. Isolations, as for reward functions
(``rollout.multi_turn.tool_isolation``):

* ``process`` (the default on Linux): each call runs in a :class:`~steadyrl.sandbox.Sandbox` worker
  (its own session, resource limits ``rollout.multi_turn.tool_limits``, credentials removed from its
  environment, output captured, everything it started killed at the time limit); values come back
  as JSON. ``workers`` sandboxes serve the calls, so up to that many run at once.
* ``thread`` (the default where there is no ``fork``): a thread per call; a call past its time limit
  is abandoned, not stopped (Python cannot stop a thread, nor interrupt C code).
* ``inline``: one after the other in the caller's thread, with no time limit (for debugging).

An environment keeps state between calls, so it runs in a sandbox of its own per episode
(:class:`~steadyrl.agents.environment.EnvironmentAgent`); :func:`wait_all` collects their replies.
"""

from __future__ import annotations

import concurrent.futures as futures
import time
import traceback
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class CallResult:
    status: str  # ok | error | timeout | budget (| max_calls, made by the tool agent)
    value: object
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def error_text(err: BaseException, limit: int = 2000) -> str:
    """The last lines of ``err``'s traceback: what a model or a log is shown."""
    lines = traceback.format_exception_only(type(err), err)
    text = "".join(lines).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _guarded(target: Callable, request) -> CallResult:
    t0 = time.perf_counter()
    try:
        return CallResult("ok", target(request), time.perf_counter() - t0)
    except (Exception, SystemExit) as err:
        return CallResult("error", error_text(err), time.perf_counter() - t0)


def from_reply(reply) -> CallResult:
    """A :class:`CallResult` of a sandbox :class:`~steadyrl.sandbox.Reply`."""
    if reply.status == "ok":
        return CallResult("ok", reply.value, reply.elapsed_s)
    status = "timeout" if reply.status == "timeout" else "error"
    text = (reply.error or reply.status).strip().splitlines()
    return CallResult(status, text[-1] if text else reply.status, reply.elapsed_s)


def wait_all(calls: list, timeout_s: float) -> list[CallResult]:
    """Replies of sandbox calls submitted together (each one's deadline counts from its submit)."""
    return [call.result if isinstance(call, _Refused) else from_reply(call.wait(timeout_s)) for call in calls]


def submit_all(boxes: list, requests: list) -> list:
    """``box.submit(request)`` for each pair; one that cannot be sent is an error result, not a raise."""
    return [_submit(box, r) for box, r in zip(boxes, requests)]


def make_sandbox(target, limits):
    """A sandbox running ``target`` (a :class:`~steadyrl.sandbox.Rebuild`: a fresh worker; a plain
    callable: a forked one); ``limits`` a :class:`~steadyrl.config.schema.RewardLimitsConfig` (or
    None for the defaults)."""
    from ..sandbox import Limits, Sandbox

    return Sandbox(target, limits=Limits(**limits.model_dump()) if limits is not None else None)


class _Budget:
    """The time left to a batch of calls sent together (``budget_s`` None: no budget)."""

    def __init__(self, budget_s: float | None):
        self.budget_s = budget_s
        self.deadline = None if budget_s is None else time.perf_counter() + budget_s

    def limit(self, timeout_s: float) -> float:
        """A call's time limit now: its own, or less when the budget ends first."""
        return timeout_s if self.deadline is None else max(0.0, min(timeout_s, self.deadline - time.perf_counter()))

    def spent(self) -> CallResult | None:
        """The result of a call not started because the budget is spent; None while time is left."""
        if self.deadline is None or time.perf_counter() < self.deadline:
            return None
        return CallResult("budget", f"not run: the turn's tool calls used their whole time budget of "
                          f"{self.budget_s:g} s (rollout.multi_turn.tool_time_budget_s)", 0.0)

    def cut(self, limit: float, timeout_s: float) -> CallResult:
        """The result of a call stopped at ``limit``: by the budget when that was below its own limit."""
        if limit < timeout_s:
            return CallResult("budget", f"stopped after {limit:.3g} s: the turn's tool calls used their whole "
                              f"time budget of {self.budget_s:g} s (rollout.multi_turn.tool_time_budget_s)", limit)
        return CallResult("timeout", f"timed out after {timeout_s:g} s", timeout_s)



class _Refused:
    """A request that could not be sent to its worker (it cannot be pickled): its error, at once."""

    def __init__(self, err: BaseException):
        self.result = CallResult("error", f"the call could not be sent to the worker: {error_text(err)}", 0.0)

    def wait(self, timeout_s: float):
        return self


def _submit(box, request):
    try:
        return box.submit(request)
    except Exception as err:  # noqa: BLE001 - RecursionError, PicklingError, SandboxUnavailable
        return _Refused(err)


class CallRunner:
    """``target(request)`` for many requests at once, under ``isolation`` (module docstring).
    ``fresh_target``: a :class:`~steadyrl.sandbox.Rebuild` of the same target, run by fresh workers
    under ``process`` isolation (else ``target`` itself, in forked ones)."""

    def __init__(self, target: Callable, isolation: str, *, workers: int = 8, limits=None, fresh_target=None):
        self.target, self.isolation, self.workers, self.limits = target, isolation, workers, limits
        self.fresh_target = fresh_target
        self._boxes: list = []

    def map(self, requests: list, timeout_s: float, budget_s: float | None = None) -> list[CallResult]:
        """One result per request, each call under ``timeout_s``, all of them within ``budget_s``."""
        if not requests:
            return []
        budget = _Budget(budget_s)
        if self.isolation == "inline":  # no time limit: the budget only stops calls from starting
            return [budget.spent() or _guarded(self.target, r) for r in requests]
        if self.isolation == "process":
            return self._in_sandboxes(requests, timeout_s, budget)
        pool = futures.ThreadPoolExecutor(max_workers=min(32, len(requests)), thread_name_prefix="steadyrl-call")
        try:
            pending = [pool.submit(_guarded, self.target, r) for r in requests]
            limit = budget.limit(timeout_s)
            deadline = time.perf_counter() + limit
            results = []
            for future in pending:
                try:
                    results.append(future.result(timeout=max(0.0, deadline - time.perf_counter())))
                except futures.TimeoutError:
                    results.append(budget.cut(limit, timeout_s))
            return results
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _in_sandboxes(self, requests: list, timeout_s: float, budget: "_Budget") -> list[CallResult]:
        while len(self._boxes) < min(self.workers, len(requests)):
            self._boxes.append(make_sandbox(self.fresh_target or self.target, self.limits))
        results: list[CallResult] = []
        for start in range(0, len(requests), len(self._boxes)):  # waves of one call per worker
            wave = requests[start : start + len(self._boxes)]
            if budget.spent():
                results += [budget.spent()] * len(wave)
                continue
            limit = budget.limit(timeout_s)
            replies = wait_all(submit_all(self._boxes, wave), limit)
            results += [budget.cut(limit, timeout_s) if r.status == "timeout" else r for r in replies]
        return results

    def close(self) -> None:
        for box in self._boxes:
            box.close()
        self._boxes = []
