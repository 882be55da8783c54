"""Asynchronous rollouts against the synchronous run, on the built-in demo (reverse strings).

    python -m benchmarks.bench_async                      # 60 steps each: sync, max_staleness 0, 1, 2
    python -m benchmarks.bench_async --quick              # smoke run: 6 steps, sync and max_staleness 1
    python -m benchmarks.bench_async --write-md BENCHMARKS.md

Each mode is ``python -m steadyrl train`` with no config (the demo: 2-layer model, warm-started,
8 prompts x 8 samples a step) and ``trainer.num_threads=1``, run one after the other: the
synchronous run uses one core; an asynchronous one uses two processes of one thread each (the
trainer and the rollout worker), so generation and training overlap on the 2 cores. The
held-out set is evaluated greedily every ``--eval-every`` steps (``demo.num_eval`` prompts).

Per mode: the training time (sum of ``time/step_s``: generation or waiting for it, scoring, the
weight push, the update; evaluation and the warm-start excluded), tokens per second of it, the
mean time the trainer waited for a batch and spent in the update (which, asynchronous, includes
one more forward pass for ``old_logprobs``), the mean staleness, and held-out accuracy before and
after with the accuracy gained per training second, and the CPU seconds of the whole run (trainer
and worker, warm-start and evaluation included: the same work in every mode). The machine is shared: the load average
before and after is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .common import REPO, machine, publish

MODES = {"sync": None, "async 0": 0, "async 1": 1, "async 2": 2}


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--num-eval", type=int, default=200)
    p.add_argument("--modes", nargs="+", choices=sorted(MODES), default=list(MODES))
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--write-md", metavar="PATH")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.eval_every, args.num_eval, args.modes = 6, 0, 50, ["sync", "async 1"]
    return args


def _command(args, staleness, out: Path) -> list[str]:
    overrides = [f"trainer.max_steps={args.steps}", "trainer.num_threads=1", f"trainer.eval_every={args.eval_every}",
                 f"demo.num_eval={args.num_eval}", "eval.num_samples=0", "trainer.samples_every=0"]
    if staleness is not None:
        overrides.append(f"rollout.asynchronous.max_staleness={staleness}")
    return [sys.executable, "-m", "steadyrl", "train", *overrides, "--output-dir", str(out)]


def run_mode(args, staleness, out: Path) -> dict:
    import resource
    import subprocess

    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(_command(args, staleness, out), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=args.timeout)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the trainer and its worker (joined by it)
    cpu_s = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1][:300]}
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time/step_s" in r]
    train_s = sum(r["time/step_s"] for r in steps)
    tokens = sum(r["throughput/tokens_per_s"] * r["time/step_s"] for r in steps)
    summary = json.loads((out / "summary.json").read_text())
    curve, elapsed = [], 0.0
    for r in rows:
        elapsed += r.get("time/step_s", 0.0)
        if "eval/accuracy" in r:
            curve.append((round(elapsed, 1), r["eval/accuracy"]))
    before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]
    return {"train_s": train_s, "tokens_per_s": tokens / train_s, "before": before, "after": after,
            "gain_per_s": (after - before) / train_s, "curve": curve[1:],
            "wait_s": sum(r.get("time/rollout_wait_s", r["time/generate_s"]) for r in steps) / len(steps),
            "staleness": sum(r.get("rollout/staleness_mean", 0.0) for r in steps) / len(steps),
            "update_s": sum(r["time/update_s"] for r in steps) / len(steps), "cpu_s": cpu_s,
            "wall_s": summary["wall_time_s"]}


def report(args, results: dict, loads: tuple[float, float], seconds: float) -> str:
    lines = [f"Command: `python -m benchmarks.bench_async{' --quick' if args.quick else ''}` "
             f"({args.steps} steps a mode, held-out {args.num_eval} prompts greedy, eval every {args.eval_every}); "
             f"{seconds:.0f} s in all.", "",
             f"Machine: {machine(1)}. Load average {loads[0]:.1f} before, {loads[1]:.1f} after (shared machine).",
             "", "| mode | training s | tokens/s | wait for batch s/step | update s/step | staleness | "
             "accuracy before -> after | accuracy points per training s | accuracy at training s | "
             "CPU s (whole run) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, r in results.items():
        if "error" in r:
            lines.append(f"| {mode} | error: {r['error']} |||||||||")
            continue
        curve = ", ".join(f"{acc:.2f} @ {s:.0f}s" for s, acc in r["curve"])
        lines.append(f"| {mode} | {r['train_s']:.1f} | {r['tokens_per_s']:.0f} | {r['wait_s']:.3f} | "
                     f"{r['update_s']:.3f} | {r['staleness']:.2f} | {r['before']:.3f} -> {r['after']:.3f} | "
                     f"{100 * r['gain_per_s']:.2f} | {curve} | {r['cpu_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    started, load0, results = time.perf_counter(), os.getloadavg()[0], {}
    with tempfile.TemporaryDirectory(prefix="bench_async_") as tmp:
        for mode in args.modes:
            results[mode] = run_mode(args, MODES[mode], Path(tmp) / mode.replace(" ", "_"))
            print(mode, json.dumps(results[mode]), flush=True)
    body = report(args, results, (load0, os.getloadavg()[0]), time.perf_counter() - started)
    return publish(args, body, results, ("bench_async", "Asynchronous rollouts"),
                   any("error" in r for r in results.values()))


if __name__ == "__main__":
    sys.exit(main())
