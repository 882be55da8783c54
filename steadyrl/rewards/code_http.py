"""``backend: http`` of the ``code`` reward: tests run by a SandboxFusion server (its ``run_code`` API).

One request per test, ``POST <url>/run_code``::

    {"code": str, "language": "python", "stdin": str, "compile_timeout": s, "run_timeout": s}
    -> {"status": "Success" | "Failed" | "SandboxError", "message": str,
        "run_result": {"status": "Finished" | "TimeLimitExceeded" | "Error", "return_code": int,
                       "stdout": str, "stderr": str, ...} | null, "compile_result": ... | null}

* ``stdio``: the program as it is, the case's input as ``stdin``; ``stdout`` is compared.
* ``call``: the program, then a few lines that print a marker and ``json.dumps(fn(*args))``.
* ``assert``: the program, the setup, then the one assert; it passes when the run exits 0.

A request that fails (connection, HTTP error, a reply of another shape) fails its test with reason
``sandbox_error``; the server's ``TimeLimitExceeded`` is ``timeout``. The URL is checked with a TCP
connect when the reward is built (``check_url: false`` skips it). The server is the sandbox: none of
the local limits apply.
"""

from __future__ import annotations

import json

from ..errors import ConfigError
from .http_client import RequestFailed, check_reachable, checked_url, post_json

__all__ = ["SandboxFusion", "MARKER"]

MARKER = "__steadyrl_value__:"


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
        """One result per test, in the shape of the local harness's results."""
        out = []
        for i, case in enumerate(tests.cases):
            if tests.mode == "stdio":
                out.append(self._post(program, case, timeout_s))
            elif tests.mode == "assert":
                out.append(self._post(program + "\n\n" + tests.setup + "\n" + case + "\n", "", timeout_s))
            else:
                result = self._post(program + _call_driver(tests.fn_name, case), "", timeout_s)
                if result["status"] == "ok":
                    lines = [x for x in result["stdout"].splitlines() if x.startswith(MARKER)]
                    try:
                        result["value"] = json.loads(lines[-1][len(MARKER):])
                    except (IndexError, ValueError):
                        result = {"status": "runtime_error", "error": "the function's value was not printed"}
                out.append(result)
        return out
