"""Run by tests/rewards/test_reward_factories_differential.py in a subprocess whose ``PYTHONPATH`` is one
version of steadyrl (today's, or the tree before issue #43 item 2): builds each case's built-in reward
from its options through :func:`steadyrl.rewards.load_reward` and through a direct call of the factory,
scores a fixed batch twice (the cache), and prints one JSON document: per case, what it built (or the
error), the scores, the metrics, and every request the rewards sent to a local stub server (method,
path, the headers that matter, body). Two versions behave alike when the documents are equal.

Usage: ``python reward_probe.py CASES.json`` (a list of ``{"id", "name", "options", "reply", "status"}``;
``"{URL}"`` in an option is the stub's address; ``reply``: the judge's text; ``status``: the stub's HTTP status).
"""

import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROMPTS = ["2+2=", "capital of France?", "2+2=", "say hi"]
COMPLETIONS = ["4", "Paris, of course.", "5", "hi there, friend"]
COLUMNS = {"answer": ["4", "Paris", "4", "hi"], "gold": ["a", "b", "c", "d"],
           "crit": [["says 4"], [{"text": "names Paris", "weight": 2.0}], ["is short"], ["greets"]]}
KEEP_HEADERS = ("authorization", "content-type", "x-a", "x-n", "x-secret")


class Stub(BaseHTTPRequestHandler):
    records: list = []
    case: dict = {}

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() in KEEP_HEADERS}
        Stub.records.append({"method": "POST", "path": self.path, "headers": headers, "body": body})
        status = self.case.get("status", 200)
        if self.path.endswith("/chat/completions"):
            reply = {"choices": [{"message": {"content": self.case.get("reply", "7")}}]}
        else:
            reply = {"scores": [float(len(c)) for c in body.get("completions", [])]}
        data = json.dumps(reply if status == 200 else {"error": "down"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def _filled(value, url):
    if isinstance(value, str):
        return value.replace("{URL}", url)
    if isinstance(value, dict):
        return {k: _filled(v, url) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, url) for v in value]
    return value


def _score(fn) -> dict:
    out = {"repr": re.sub(r" at 0x[0-9a-f]+", "", repr(fn)), "reads_columns": list(getattr(fn, "reads_columns", ()) or ())}
    try:
        out["scores"] = [fn(PROMPTS, COMPLETIONS, **COLUMNS) for _ in range(2)]
    except Exception as err:  # noqa: BLE001 (the error is the result compared)
        out["score_error"] = f"{type(err).__name__}: {err}"
    metrics = getattr(fn, "metrics", None)
    if callable(metrics):
        out["metrics"] = {k: v for k, v in metrics().items() if "time" not in k and "seconds" not in k}
    return out


def run_case(case: dict, url: str) -> dict:
    from steadyrl.rewards import BUILTIN_REWARDS, load_reward

    options = _filled(case["options"], url)
    result = {}
    for how in ("load_reward", "direct"):
        Stub.records, Stub.case = [], case
        try:
            fn = load_reward(case["name"], **options) if how == "load_reward" else \
                BUILTIN_REWARDS[case["name"]](**options)
        except Exception as err:  # noqa: BLE001
            result[how] = {"error": f"{type(err).__name__}: {err}".replace(url, "{URL}")}
            continue
        got = _score(fn)
        got["requests"] = sorted((json.dumps(r, sort_keys=True) for r in Stub.records))
        result[how] = json.loads(json.dumps(got, default=str).replace(url, "{URL}"))
    return result


def main() -> None:
    os.environ.update(PROBE_KEY="sekret-123", PROBE_URL_VAR="unused")
    cases = json.loads(open(sys.argv[1]).read())
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    print(json.dumps({case["id"]: run_case(case, url) for case in cases}, sort_keys=True, default=str))
    server.shutdown()


if __name__ == "__main__":
    main()
