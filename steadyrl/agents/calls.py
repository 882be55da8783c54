"""Running a turn's tool and environment calls: all at once, each under a time limit.

``run_calls(thunks, timeout_s, isolation)`` runs zero-argument callables concurrently and returns,
for each, a :class:`CallResult`: ``("ok", value)``, ``("error", text)`` or ``("timeout", text)``.
Nothing a call does propagates to the caller. Isolations, as for reward functions:

* ``thread`` (the default where there is no ``fork``): a thread per call; a call past its time limit
  is abandoned, not stopped (Python cannot stop a thread, nor interrupt C code).
* ``inline``: one after the other in the caller's thread, with no time limit (for debugging).
* ``process`` (the default on Linux; stateless calls only): a call runs in a forked child of its
  own (:mod:`.forked`), in its own process group, killed with everything it started at the time
  limit. Its value comes back as JSON.
"""

from __future__ import annotations

import concurrent.futures as futures
import time
import traceback
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class CallResult:
    status: str  # ok | error | timeout
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


def _guarded(thunk: Callable[[], object]) -> CallResult:
    t0 = time.perf_counter()
    try:
        return CallResult("ok", thunk(), time.perf_counter() - t0)
    except (Exception, SystemExit) as err:
        return CallResult("error", error_text(err), time.perf_counter() - t0)


def run_calls(thunks: list[Callable[[], object]], timeout_s: float, isolation: str) -> list[CallResult]:
    """Each thunk's result, in order; the calls run concurrently (``inline``: in order)."""
    if not thunks:
        return []
    if isolation == "inline":
        return [_guarded(t) for t in thunks]
    if isolation == "process":
        from .forked import run_isolated

        return run_isolated(thunks, timeout_s)
    pool = futures.ThreadPoolExecutor(max_workers=min(32, len(thunks)), thread_name_prefix="steadyrl-call")
    try:
        pending = [pool.submit(_guarded, t) for t in thunks]
        deadline = time.perf_counter() + timeout_s
        results = []
        for future in pending:
            try:
                results.append(future.result(timeout=max(0.0, deadline - time.perf_counter())))
            except futures.TimeoutError:
                results.append(CallResult("timeout", f"timed out after {timeout_s:g} s", timeout_s))
        return results
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
