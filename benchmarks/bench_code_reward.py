"""Code-reward throughput: the ``code`` built-in against plain subprocess loops, in tests per second.

    python -m benchmarks.bench_code_reward                   # 64 samples x 20 stdin/stdout tests, workers 1, 2, 4, 8
    python -m benchmarks.bench_code_reward --quick           # smoke run: 8 samples x 5 tests, workers 1, 2
    python -m benchmarks.bench_code_reward --write-md BENCHMARKS.md
    python -m benchmarks.bench_code_reward --isolation 10    # one sample through each isolation level, 10 rounds

The batch: ``--samples`` completions, each a fenced Python program (three in four correct, one in
four printing a wrong answer), against ``--tests`` stdin/stdout cases of an APPS-style
``input_output`` (read ``n`` numbers, print their sum). Methods, each on the same batch:

* **steadyrl code, workers W**: ``RewardScorer([RewardSpec("code", load_reward("code", workers=W))])``
  as the trainer runs it - in a sandbox worker process, the whole batch per call, each sample a
  fresh ``python -I`` harness with a contained child per test (bubblewrap's view where installed,
  namespaces, a cgroup per sample where one can be made, limits, kills);
* **loop, subprocess per sample**: the plain way - for each sample in turn, one
  ``subprocess.run([python, "-c", driver])`` that ``exec``\\ s the program once per test with
  ``sys.stdin`` / ``sys.stdout`` swapped for strings; no limits, no isolation, no time limit per test;
* **loop, subprocess per test**: for each sample and each test in turn, ``subprocess.run([python,
  solution.py], input=...)`` - what most hand-written code rewards do.

Each method runs ``--repeats`` times (after one warm-up batch for the reward, which forks its
worker then); the table shows the median wall time and ``samples x tests / wall time``. Every
method's scores are checked against the expected ones.

``--isolation ROUNDS`` instead measures what each level of the local sandbox costs one sample:
the ``code`` reward's ``score_one`` on one correct program against ``--tests`` cases, in the
calling process (no worker pool), for each level this machine can give - namespaces, namespaces
+ a cgroup, bubblewrap's view, view + cgroup - taken in turn in every round (interleaved, so a
change of load hits all of them alike); the table shows each level's median over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import machine, write_md

CORRECT = "n = int(input())\nprint(sum(map(int, input().split())))"
WRONG = "n = int(input())\nprint(sum(map(int, input().split())) + 1)"
DRIVER = """
import io, json, sys
job = json.loads(sys.stdin.read())
code = compile(job["program"], "solution.py", "exec")
outs = []
for text in job["inputs"]:
    sys.stdin, sys.stdout = io.StringIO(text), io.StringIO()
    try:
        exec(code, {"__name__": "__main__"})
    except BaseException:
        pass
    outs.append(sys.stdout.getvalue())
    sys.stdout = sys.__stdout__
sys.__stdout__.write(json.dumps(outs))
"""


def batch(samples: int, tests: int) -> tuple[list[str], list[str], list[float]]:
    inputs = [f"{k + 1}\n" + " ".join(str(j * 7 % 13) for j in range(k + 1)) + "\n" for k in range(tests)]
    outputs = [f"{sum(j * 7 % 13 for j in range(k + 1))}\n" for k in range(tests)]
    tests_json = json.dumps({"inputs": inputs, "outputs": outputs})
    programs = [WRONG if i % 4 == 3 else CORRECT for i in range(samples)]
    expected = [0.0 if i % 4 == 3 else 1.0 for i in range(samples)]
    return [f"```python\n{p}\n```" for p in programs], [tests_json] * samples, expected


def _extract(completion: str) -> str:
    return completion.split("```python\n", 1)[1].rsplit("```", 1)[0]


def run_reward(completions, tests, workers: int, repeats: int) -> tuple[list[float], list]:
    from steadyrl.rewards import RewardScorer, RewardSpec, load_reward

    fn = load_reward("code", workers=workers, test_timeout_s=5.0, sample_timeout_s=60.0)
    times = []
    with RewardScorer([RewardSpec("code", fn, timeout_s=600, chunk_size=None)]) as scorer:
        scorer.score(["p"] * 2, completions[:2], {"tests": tests[:2]})  # forks the worker
        for _ in range(repeats):
            t0 = time.perf_counter()
            result = scorer.score(["p"] * len(completions), completions, {"tests": tests})
            times.append(time.perf_counter() - t0)
    return times, result.raw["code"]


def _pass_rate(outs: list[str], tests_json: str) -> float:
    from steadyrl.rewards.code_tests import stdout_matches

    expected = json.loads(tests_json)["outputs"]
    return sum(stdout_matches(o, e) for o, e in zip(outs, expected)) / len(expected)


def run_loop_per_sample(completions, tests, repeats: int) -> tuple[list[float], list]:
    times = []
    for _ in range(repeats):
        t0, scores = time.perf_counter(), []
        for completion, tests_json in zip(completions, tests):
            job = json.dumps({"program": _extract(completion), "inputs": json.loads(tests_json)["inputs"]})
            proc = subprocess.run([sys.executable, "-c", DRIVER], input=job, capture_output=True, text=True,
                                  timeout=60)
            scores.append(_pass_rate(json.loads(proc.stdout), tests_json))
        times.append(time.perf_counter() - t0)
    return times, scores


def run_loop_per_test(completions, tests, repeats: int) -> tuple[list[float], list]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            t0, scores = time.perf_counter(), []
            for i, (completion, tests_json) in enumerate(zip(completions, tests)):
                path = Path(tmp, f"solution_{i}.py")
                path.write_text(_extract(completion))
                outs = [subprocess.run([sys.executable, str(path)], input=text, capture_output=True, text=True,
                                       timeout=10).stdout for text in json.loads(tests_json)["inputs"]]
                scores.append(_pass_rate(outs, tests_json))
            times.append(time.perf_counter() - t0)
    return times, scores

ISOLATION_LEVELS = (("namespaces", "namespaces", False), ("namespaces + cgroup", "namespaces", True),
                    ("bubblewrap view", "auto", False), ("bubblewrap view + cgroup", "auto", True))


def run_isolation(tests: int, rounds: int) -> list[tuple[str, float, int]]:
    """``(level, median ms per sample, isolation_level)`` for each level the machine gives."""
    from steadyrl.rewards import load_reward

    completions, tests_json, _ = batch(1, tests)
    rewards = []
    for name, sandbox, cgroup in ISOLATION_LEVELS:
        fn = load_reward("code", sandbox=sandbox, test_timeout_s=5.0, sample_timeout_s=60.0)
        if (sandbox == "auto" and not fn.view) or (cgroup and not fn.cgroup):
            print(f"{name}: not available on this machine, skipped", file=sys.stderr)
            continue
        fn.cgroup = cgroup  # the same reward with its per-sample cgroup off, to price it
        fn.level = (3 if fn.view else 1) + int(cgroup)
        rewards.append((name, fn, []))
    for _ in range(rounds):
        for _, fn, times in rewards:
            t0 = time.perf_counter()
            score = fn.score_one(completions[0], tests_json[0])[0]
            times.append(time.perf_counter() - t0)
            if score != 1.0:
                raise RuntimeError(f"isolation benchmark: a correct program scored {score}")
    return [(name, 1000 * statistics.median(times), fn.level) for name, fn, times in rewards]


def isolation_table(args, given: list[str]) -> str:
    load0 = os.getloadavg()[0]
    rows = run_isolation(args.tests, args.isolation)
    body = [f"Command: `python -m benchmarks.bench_code_reward {' '.join(given)}`", "",
            f"Machine: {machine()}.", "",
            f"One correct sample, {args.tests} stdin/stdout tests, {args.isolation} interleaved rounds; load "
            f"average (1 min) before / after: {load0:.2f} / {os.getloadavg()[0]:.2f}.", "",
            "| local sandbox | `reward/code/isolation_level` | ms per sample (median) | ms per test |",
            "|---|---:|---:|---:|"]
    body += [f"| {n} | {level} | {ms:.0f} | {ms / args.tests:.1f} |" for n, ms, level in rows]
    return "\n".join(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-md", metavar="PATH")
    parser.add_argument("--isolation", type=int, metavar="ROUNDS",
                        help="price each sandbox level on one sample instead (module docstring)")
    args = parser.parse_args(argv)
    if args.isolation:
        given = [x for x in (sys.argv[1:] if argv is None else argv)]
        if "--write-md" in given:
            at = given.index("--write-md")
            del given[at:at + 2]
        body = isolation_table(args, given)
        print(body)
        if args.write_md:
            write_md(Path(args.write_md), "bench_code_isolation", "Code reward: what each sandbox level costs", body)
        return 0
    if args.quick:
        args.samples, args.tests, args.workers, args.repeats = 8, 5, [1, 2], 1
    completions, tests, expected = batch(args.samples, args.tests)
    load0 = os.getloadavg()[0]
    rows = []
    runs = [(f"steadyrl code, workers {w}", lambda w=w: run_reward(completions, tests, w, args.repeats))
            for w in args.workers]
    runs += [("loop, subprocess per sample", lambda: run_loop_per_sample(completions, tests, args.repeats)),
             ("loop, subprocess per test", lambda: run_loop_per_test(completions, tests, args.repeats))]
    for name, run in runs:
        times, scores = run()
        if scores != expected:
            print(f"{name}: wrong scores {scores}", file=sys.stderr)
            return 1
        wall = statistics.median(times)
        rows.append((name, wall, args.samples * args.tests / wall))
        print(f"{name:32s} {wall:8.2f} s  {rows[-1][2]:10.0f} tests/s", flush=True)
    base = next(r[2] for r in rows if r[0] == "loop, subprocess per sample")
    given = list(sys.argv[1:] if argv is None else argv)
    if "--write-md" in given:  # where the table goes is not part of how it was made
        at = given.index("--write-md")
        del given[at:at + 2]
    flags = "".join(" " + x for x in given)
    body = [f"Command: `python -m benchmarks.bench_code_reward{flags}`", "",
            f"Machine: {machine()}.", "",
            f"Batch: {args.samples} samples x {args.tests} stdin/stdout tests; median of {args.repeats} "
            f"batch(es); load average (1 min) before / after: {load0:.2f} / {os.getloadavg()[0]:.2f}.", "",
            "| method | wall time per batch (s) | tests per second | vs loop, subprocess per sample |",
            "|---|---:|---:|---:|"]
    body += [f"| {n} | {w:.2f} | {t:,.0f} | {t / base:.2f}x |" for n, w, t in rows]
    print("\n".join(body))
    if args.write_md:
        write_md(Path(args.write_md), "bench_code_reward", "Code reward throughput", "\n".join(body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
