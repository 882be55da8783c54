"""``backend: http`` of the ``code`` reward: tests run by a SandboxFusion server (its ``run_code`` API).

One request per test, ``POST <url>/run_code``::

    {"code": str, "language": "python", "stdin": str, "compile_timeout": s, "run_timeout": s}
    -> {"status": "Success" | "Failed" | "SandboxError", "message": str,
        "run_result": {"status": "Finished" | "TimeLimitExceeded" | "Error", "return_code": int,
                       "stdout": str, "stderr": str, ...} | null, "compile_result": ... | null}

* ``stdio``: the program as it is, the case's input as ``stdin``; ``stdout`` is compared.
* ``call``: the program, then a few lines that print a marker and ``json.dumps(fn(*args))``.
* ``assert``: split as the local backend splits it (:func:`steadyrl.rewards.code_jobs.job_cases`):
  each call of an ``assert`` that converts is one request - the program, the setup, then a driver
  that prints a marker and the returned value as tagged plain data (the local harness's encoding,
  :mod:`steadyrl.sandbox.harness_calls`) - and the ``assert`` itself is evaluated by the reward on
  those values, never by the program's process: a program that exits 0 before the check
  (``os._exit(0)``) gives no value and fails. An ``assert`` that does not convert is sent whole and
  passes when the run exits 0 (the program can cheat those, as locally: docs/rewards.md).

A printed marker line is a *value* the program returns, never a verdict: the reward compares it.

A request that fails (connection, HTTP error, a reply of another shape) fails its test with reason
``sandbox_error``; the server's ``TimeLimitExceeded`` is ``timeout``. The URL is checked with a TCP
connect when the reward is built (``check_url: false`` skips it). The server is the sandbox: none of
the local limits apply.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from .http_client import RequestFailed, check_reachable, checked_url, post_json

__all__ = ["SandboxFusion", "MARKER"]

MARKER = "__steadyrl_value__:"
_TAGGED = (Path(__file__).resolve().parents[1] / "sandbox" / "harness_calls.py").read_text(encoding="utf-8")
"""The local harness's encoder of returned values (standard library only), run in a namespace of its own."""


def _tagged_driver(case: dict) -> str:
    """One converted ``assert`` call: the function's value as tagged data after the marker."""
    return ("\n\nimport json as _steadyrl_json, sys as _steadyrl_sys\n"
            "_steadyrl = {'__name__': '_steadyrl'}\n"
            f"exec({_TAGGED!r}, _steadyrl)\n"
            "_steadyrl_fn = _steadyrl['_function'](globals(), " + repr(case["fn"]) + ")\n"
            f"_steadyrl_args = [_steadyrl['decode'](a) for a in _steadyrl_json.loads({json.dumps(case['args'])!r})]\n"
            "_steadyrl_kwargs = {k: _steadyrl['decode'](v) for k, v in "
            f"_steadyrl_json.loads({json.dumps(case.get('kwargs', {}))!r}).items()}}\n"
            "_steadyrl_value = _steadyrl['encode'](_steadyrl_fn(*_steadyrl_args, **_steadyrl_kwargs))\n"
            f"_steadyrl_sys.stdout.write('\\n{MARKER}' + _steadyrl_json.dumps(_steadyrl_value) + '\\n')\n")


def _call_driver(fn_name: str, args: list) -> str:
    return ("\n\nimport json as _json, sys as _sys\n"
            f"_fn = globals().get({fn_name!r})\n"
            f"if _fn is None and 'Solution' in globals(): _fn = getattr(Solution(), {fn_name!r})\n"
            f"_value = _fn(*_json.loads({json.dumps(args)!r}))\n"
            f"_sys.stdout.write('\\n{MARKER}' + _json.dumps(_value) + '\\n')\n")


class SandboxFusion:
    """A client of one SandboxFusion server (module docstring)."""

    def __init__(self, url, *, request_timeout_s: float, check_url: bool, language: str):
        if not isinstance(url, str) or not url:
            raise ConfigError("code reward: backend: http needs the option url (the SandboxFusion server, e.g. "
                              "http://localhost:8080)")
        url = checked_url("code reward: option url", url)
        self.url = url.rstrip("/") + "/run_code"
        self.request_timeout_s, self.language = request_timeout_s, language
        if check_url:
            check_reachable("code reward: option url", url)

    def _post(self, code: str, stdin: str, timeout_s: float) -> dict:
        body = {"code": code, "language": self.language, "stdin": stdin, "compile_timeout": timeout_s,
                "run_timeout": timeout_s}
        try:
            reply = post_json(self.url, body, timeout_s=self.request_timeout_s, retries=1, backoff_s=0.5)
        except RequestFailed as err:
            return {"status": "sandbox_error", "error": str(err)}
        run = reply.get("run_result") if isinstance(reply, dict) else None
        if not isinstance(run, dict):
            message = reply.get("message", "") if isinstance(reply, dict) else ""
            compile_ = reply.get("compile_result") if isinstance(reply, dict) else None
            if isinstance(compile_, dict) and compile_.get("status") == "TimeLimitExceeded":
                return {"status": "timeout", "error": "compile time limit"}
            return {"status": "sandbox_error", "error": f"no run_result in the reply {str(message)[:200]!r}"}
        if run.get("status") == "TimeLimitExceeded":
            return {"status": "timeout", "error": "TimeLimitExceeded"}
        stderr = str(run.get("stderr") or "")[-500:]
        if run.get("return_code") != 0 or run.get("status") != "Finished":
            why = "memory" if "MemoryError" in stderr else "wrong_answer" if "AssertionError" in stderr else "runtime_error"
            return {"status": why, "error": stderr}
        return {"status": "ok", "stdout": str(run.get("stdout") or ""), "error": stderr}

    def run(self, program: str, tests, timeout_s: float) -> list[dict]:
        """One result per ``stdio`` or ``call`` test, in the shape of the local harness's results."""
        out = []
        for case in tests.cases:
            if tests.mode == "stdio":
                out.append(self._post(program, case, timeout_s))
            else:
                out.append(_with_value(self._post(program + _call_driver(tests.fn_name, case), "", timeout_s)))
        return out

    def run_cases(self, program: str, setup: str, cases: list[dict], timeout_s: float) -> list[dict]:
        """One result per case of :func:`~steadyrl.rewards.code_jobs.job_cases` (``assert`` tests):
        a call's tagged value, or an unconverted statement's exit status."""
        out = []
        for case in cases:
            head = program + "\n\n" + setup + "\n"
            if "exec" in case:
                out.append(self._post(head + case["exec"] + "\n", "", timeout_s))
            else:
                out.append(_with_value(self._post(head + _tagged_driver(case), "", timeout_s)))
        return out


def _with_value(result: dict) -> dict:
    """``result`` with the value printed after the last marker, or a failure when there is none."""
    if result["status"] != "ok":
        return result
    lines = [x for x in result["stdout"].splitlines() if x.startswith(MARKER)]
    try:
        return {**result, "value": json.loads(lines[-1][len(MARKER):])}
    except (IndexError, ValueError):
        return {"status": "runtime_error", "error": "the function's value was not printed"}
