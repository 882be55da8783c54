"""The ``code`` built-in: run the program a completion holds against the row's tests.

For sample ``i`` with tests ``t_1 .. t_n`` (:mod:`steadyrl.rewards.code_tests` for the formats)::

    pass_rate_i = #{j : program_i passes t_j} / n
    r_i = pass_rate_i                          (score: pass_rate)
        = 1 if pass_rate_i == 1 else 0         (score: all_pass)
        = 0 where pass_rate_i < threshold      (threshold, with either)
        = None if a test timed out and on_timeout: none

Each sample is one fresh, contained process (:mod:`steadyrl.sandbox.programs`, ``backend: local``)
or one request per test to a SandboxFusion server (:mod:`steadyrl.rewards.code_http`,
``backend: http``); ``workers`` samples run at once. The reward is called on the whole batch
(``preferred_chunk_size = None``) in a sandbox worker process (``preferred_isolation =
"process"``), so the programs are started by that worker, never by the trainer.

A sample that does not pass every test is counted by the reason of its first failing test
(``reward/code/failures/<reason>``): ``no_code``, ``bad_tests``, ``wrong_answer``,
``runtime_error``, ``syntax_error``, ``timeout``, ``memory``, ``output_limit``, ``processes``,
``crashed`` (killed by a signal), ``killed`` (the program killed its harness), ``sandbox_error``.
Other metrics: ``time_s``, ``tests`` (tests run), ``pass_rate``, and - what the local sandbox
could do here, asked once when the reward is built - ``network_isolated``, ``readonly_fs``,
``separate_user`` (1 or 0) and ``isolation_level`` (:data:`ISOLATION_LEVELS`).

``assert`` tests are turned into calls where they can be (:mod:`.code_asserts`): the program's
values come back as plain data and the check runs here, out of the program's reach.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import ConfigError
from ..metrics import Count
from ..sandbox import cgroups
from ..sandbox.programs import probe_isolation, run_program
from ..sandbox.view import bwrap_path
from .code_asserts import Opaque, decode
from .code_jobs import as_json, failure, job_cases, judge_assert
from .code_tests import TestsError, extract_program, parse_tests, stdout_matches, value_matches
from .registry import register_reward
from .isolation import default_isolation

__all__ = ["CodeReward", "code_reward"]
ISOLATION_LEVELS = {0: "no namespaces: the limits per process, the scrubbed environment and the kill only",
                    1: "hand-written namespaces (pid, IPC, network, host file system read-only)",
                    2: "hand-written namespaces and a cgroup per sample",
                    3: "bubblewrap's view (a fresh minimal file system, a capped tmpfs) and its namespaces",
                    4: "bubblewrap's view and a cgroup per sample"}
"""``reward/code/isolation_level``: what the local sandbox got on this machine (docs/rewards.md)."""


class CodeReward:
    """The ``code`` reward (module docstring), built from its checked options
    (:class:`steadyrl.config.reward_options.CodeOptions`: names, types, ranges and the choices)."""

    preferred_isolation = "process"
    preferred_chunk_size = None  # the whole batch: the reward's own pool runs the samples in parallel

    def __init__(self, options):
        self.__name__ = "code"
        o = options
        self.tests_key, self.reads_columns = o.tests_key, (o.tests_key,)
        self.test_format, self.extract, self.score, self.on_timeout = o.test_format, o.extract, o.score, o.on_timeout
        self.pattern = None if o.pattern is None else re.compile(o.pattern, re.DOTALL)  # checked: it compiles
        self.threshold, self.tolerance = o.threshold, float(o.tolerance)
        self.workers, self.max_tests = o.workers, o.max_tests
        self.test_timeout_s, self.sample_timeout_s = float(o.test_timeout_s), float(o.sample_timeout_s)
        self.limits = {"memory_mb": o.memory_mb, "processes": o.processes, "file_size_mb": o.file_size_mb,
                       "open_files": o.open_files, "output_bytes": o.max_output_kib * 1024,
                       "network": o.no_network, "readonly_fs": o.readonly_fs}
        self.python = o.python or sys.executable
        self.backend, self.sandbox, self.language = o.backend, o.sandbox, o.language
        self._counts_lock = threading.Lock()
        self._reset_counts()
        if self.backend == "http":
            from .code_http import SandboxFusion

            self.preferred_isolation = default_isolation()  # "thread" where there is no fork
            self.remote = SandboxFusion(o.url, request_timeout_s=o.request_timeout_s, check_url=o.check_url,
                                        language=o.language)
            self.isolation, self.view, self.cgroup, self.level = {}, False, False, 0
        else:
            if not sys.platform.startswith("linux"):
                raise ConfigError("code reward: backend: local needs Linux (namespaces, /proc, prctl); use "
                                  "backend: http with a SandboxFusion server")
            if not os.path.exists(self.python):
                raise ConfigError(f"code reward: option python={o.python!r} does not exist")
            self._probe(self.sandbox, o.no_network, o.readonly_fs)

    def _probe(self, sandbox: str, network: bool, readonly_fs: bool) -> None:
        """What the local sandbox gets on this machine (asked once): bubblewrap's view where it is
        installed and works (``sandbox: auto``) or always (``bwrap``), a cgroup per sample where one
        can be made; ``self.isolation`` and ``self.level`` (:data:`ISOLATION_LEVELS`)."""
        self.view, probe = False, {}
        if sandbox != "namespaces":
            if bwrap_path() is None and sandbox == "bwrap":
                raise ConfigError("code reward: option sandbox='bwrap' but bubblewrap is not installed (Debian / "
                                  "Ubuntu: apt-get install bubblewrap); use sandbox: auto or namespaces")
            if bwrap_path() is not None:
                probe = probe_isolation(python=self.python, network=network, readonly_fs=readonly_fs, view=True)
                self.view = bool(probe.get("view"))  # it answered from inside the view
                if not self.view and sandbox == "bwrap":
                    raise ConfigError(f"code reward: option sandbox='bwrap' but bubblewrap cannot start "
                                      f"{self.python!r} here (no user namespaces for it?); use sandbox: auto")
        self.isolation = probe if self.view else probe_isolation(python=self.python, network=network,
                                                                 readonly_fs=readonly_fs)
        self.cgroup = cgroups.available()
        namespaces = bool(self.isolation.get("pid"))
        self.level = (3 if self.view else 1 if namespaces else 0) + (1 if self.cgroup and (self.view or namespaces) else 0)

    def __repr__(self) -> str:
        return f"CodeReward(backend={self.backend!r}, tests_key={self.tests_key!r})"

    # --- counting -----------------------------------------------------------------------------
    def _reset_counts(self) -> None:
        self._failures, self._seconds, self._tests, self._rates = {}, 0.0, 0, []

    def metrics(self) -> dict[str, float]:
        """Failures by reason, time, tests run, mean pass rate and the isolation in effect since the last call."""
        with self._counts_lock:
            out = {f"failures/{why}": Count(n) for why, n in sorted(self._failures.items())}
            if self._rates:
                out.update(time_s=self._seconds, tests=float(self._tests),
                           pass_rate=sum(self._rates) / len(self._rates))
            self._reset_counts()
        if self.backend == "local":
            out.update(network_isolated=float(bool(self.isolation.get("network"))),
                       readonly_fs=float(bool(self.isolation.get("readonly_fs"))),
                       separate_user=float(self.isolation.get("user") == "nobody"), isolation_level=float(self.level))
        return out

    # --- scoring ------------------------------------------------------------------------------
    def __call__(self, prompts, completions, **columns) -> list:
        if self.tests_key not in columns:
            raise KeyError(f"the code reward reads its tests from column {self.tests_key!r}, but the batch has "
                           f"columns {sorted(columns)}; set the option tests_key")
        t0 = time.perf_counter()
        rows = list(zip(completions, columns[self.tests_key]))
        with ThreadPoolExecutor(max_workers=min(self.workers, max(1, len(rows)))) as pool:
            outcomes = list(pool.map(lambda row: self.score_one(*row), rows))
        with self._counts_lock:
            self._seconds += time.perf_counter() - t0
            for score, why, tests, rate in outcomes:
                if why is not None:
                    self._failures[why] = self._failures.get(why, 0) + 1
                self._tests += tests
                if rate is not None:
                    self._rates.append(rate)
        return [score for score, _, _, _ in outcomes]

    def score_one(self, completion, tests_value) -> tuple:
        """``(score, reason or None, tests run, pass rate or None)`` of one sample."""
        text = completion if isinstance(completion, str) else _message_text(completion)
        program = extract_program(text, self.extract, self.pattern)
        if program is None:
            return 0.0, "no_code", 0, 0.0
        try:
            tests = parse_tests(tests_value, self.test_format, self.max_tests)
        except TestsError:
            return None, "bad_tests", 0, None
        reasons = self._run(program, tests)
        passed = sum(r is None for r in reasons)
        rate = passed / len(reasons)
        why = next((r for r in reasons if r is not None), None)
        if "timeout" in reasons and self.on_timeout == "none":
            return None, "timeout", len(reasons), rate
        score = rate if self.score == "pass_rate" else float(passed == len(reasons))
        if self.threshold is not None and rate < self.threshold:
            score = 0.0
        return score, why, len(reasons), rate

    def _run(self, program: str, tests) -> list:
        """Per test: ``None`` (passed) or the reason it failed."""
        if self.backend == "http" and tests.mode != "assert":
            results = self.remote.run(program, tests, self.test_timeout_s)
            return [self._judge(tests, i, r) for i, r in enumerate(results)]
        cases, checks = job_cases(program, tests)
        if self.backend == "http":  # the checks are the reward's, on the values the server sent back
            results = self.remote.run_cases(program, tests.setup, cases, self.test_timeout_s)
            return [judge_assert(check, [results[j] for j in indices]) for check, indices in checks]
        job = {"source": program, "mode": "stdio" if tests.mode == "stdio" else "calls", "cases": cases,
               "setup": tests.setup, "test_time_s": self.test_timeout_s, "sample_time_s": self.sample_timeout_s,
               **self.limits}
        reply = run_program(job, python=self.python, view=self.view, cgroup=self.cgroup)
        results = reply.get("results") or []
        if len(results) != len(cases):
            error = str(reply.get("error", "no result"))
            why = error if error in ("timeout", "memory") else "killed" if "(killed)" in error else "sandbox_error"
            return [why] * len(tests.cases)
        if tests.mode != "assert":
            return [self._judge(tests, i, r) for i, r in enumerate(results)]
        return [judge_assert(check, [results[j] for j in indices]) for check, indices in checks]

    def _judge(self, tests, i: int, result) -> str | None:
        status = result.get("status") if isinstance(result, dict) else None
        if status != "ok":
            return failure(result)
        if tests.mode == "stdio":
            return None if stdout_matches(str(result.get("stdout", "")), tests.expected[i], self.tolerance) \
                else "wrong_answer"
        value = result.get("value")
        if self.backend == "local":
            value = as_json(decode(value)) if value is not None else Opaque("no value")
        return None if value_matches(value, tests.expected[i], self.tolerance) else "wrong_answer"


def _message_text(item) -> str:
    if isinstance(item, list):
        return "".join(str(m.get("content", "")) for m in item if isinstance(m, dict))
    return str(item)


@register_reward("code")
def code_reward(**options) -> CodeReward:
    """Pass rate of the completion's program on the row's tests (module docstring; docs/rewards.md);
    ``options``: :class:`steadyrl.config.reward_options.CodeOptions`, whose names and defaults they are."""
    from ..config.reward_options import checked_options  # steadyrl.config imports the rewards

    return CodeReward(checked_options("code", options))
