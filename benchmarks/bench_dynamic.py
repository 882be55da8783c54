"""Dynamic sampling on the demo: held-out accuracy against wall time, with and without it.

    python -m benchmarks.bench_dynamic                      # seeds 0 1, demo's 600 steps, eval every 100
    python -m benchmarks.bench_dynamic --quick              # smoke run: one seed, 40 steps, eval every 20
    python -m benchmarks.bench_dynamic --write-md BENCHMARKS.md

Every run is ``steadyrl train`` with no config (the built-in reverse-string demo, ``make demo``'s
job) in a fresh process, with ``trainer.seed=S``, ``trainer.eval_every=N`` and, for the dynamic
arm, ``algorithm.dynamic_sampling=true`` (filter ``equal_scores``, at most
``dynamic_sampling_max_draws`` 3 draws per step). Both arms run the same number of steps; the
dynamic arm generates more per step (refills), so the comparison that matters is accuracy at
equal *wall time*, not at equal steps.

Per run and eval point: the step, the wall seconds spent in training steps up to it (the sum of
``time/step_s``: evaluation time is left out of both arms alike) and ``eval/accuracy`` on the
demo's held-out split; per run the total wall time of the process and the mean of
``dynamic/draws`` and ``dynamic/refilled_frac``. ``--parallel`` runs that many processes at once.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import REPO, machine, publish


def run_one(out: Path, seed: int, dynamic: bool, steps: int, eval_every: int, timeout: float) -> dict:
    """One demo run in a fresh process -> its eval curve and totals (or ``{"error": ...}``)."""
    overrides = [f"trainer.seed={seed}", f"trainer.eval_every={eval_every}", f"trainer.max_steps={steps}",
                 "trainer.save_every=0", f"algorithm.dynamic_sampling={'true' if dynamic else 'false'}"]
    run_dir = out / f"{'dynamic' if dynamic else 'plain'}_seed{seed}"
    cmd = [sys.executable, "-m", "steadyrl", "train", "--output-dir", str(run_dir), "--overwrite", *overrides]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seed": seed, "dynamic": dynamic, "error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        return {"seed": seed, "dynamic": dynamic, "error": " | ".join(proc.stderr.strip().splitlines()[-3:])[:400]}
    return {"wall_s": round(wall, 1), **read_run(run_dir, seed, dynamic)}


def read_run(run_dir: Path, seed: int, dynamic: bool) -> dict:
    """A run directory's eval curve against cumulative training wall time (a finished run, or the
    steps a stopped one reached)."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train_s, curve, draws, refilled = 0.0, [], [], []
    for r in rows:
        train_s += r.get("time/step_s", 0.0)
        if "dynamic/draws" in r:
            draws.append(r["dynamic/draws"])
            refilled.append(r.get("dynamic/refilled_frac", 0.0))
        if "eval/accuracy" in r:
            curve.append({"step": r.get("step", 0), "train_s": round(train_s, 1), "accuracy": r["eval/accuracy"]})
    last = max(r.get("step", 0) for r in rows)
    return {"seed": seed, "dynamic": dynamic, "steps": last, "train_s": round(train_s, 1),
            "curve": curve, "draws_mean": statistics.mean(draws) if draws else None,
            "refilled_frac_mean": statistics.mean(refilled) if refilled else None}


def _table(results: list[dict]) -> list[str]:
    lines = ["| dynamic sampling | seed | step | training wall s (cumulative) | eval/accuracy |",
             "|---|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['dynamic']} | {r['seed']} | failed: {r['error']} | | |")
            continue
        lines += [f"| {'on' if r['dynamic'] else 'off'} | {r['seed']} | {p['step']} | {p['train_s']:.1f} "
                  f"| {p['accuracy']:.3f} |" for p in r["curve"]]
    lines += ["", "| dynamic sampling | seed | process wall s | training wall s | last eval/accuracy "
              "| mean dynamic/draws | mean dynamic/refilled_frac |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            continue
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        wall = f"{r['wall_s']:.0f}" if "wall_s" in r else f"stopped at step {r['steps']}"
        lines.append(f"| {'on' if r['dynamic'] else 'off'} | {r['seed']} | {wall} | {r['train_s']:.0f} "
                     f"| {r['curve'][-1]['accuracy']:.3f} | {fmt(r['draws_mean'])} | {fmt(r['refilled_frac_mean'])} |")
    return lines


def report(args, results: list[dict], load: tuple, seconds: float) -> str:
    command = " ".join(["python -m benchmarks.bench_dynamic", *args.argv])
    lines = [f"Command: `{command}`", "", f"Machine: {machine()}.", "",
             f"Workload: `steadyrl train` with no config (the reverse-string demo), {args.steps} steps, "
             f"eval every {args.eval_every} steps on the held-out split, seeds {' '.join(map(str, args.seeds))}, "
             f"{args.parallel} process(es) at once. "
             + ("Tabulated from the run directories of runs stopped before the end (--summarize)." if args.summarize
                else f"Whole benchmark: {seconds / 60:.1f} min."), "",
             f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}.", ""]
    return "\n".join(lines + _table(results)) + "\n"


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: one seed, 40 steps, eval every 20")
    p.add_argument("--seeds", type=int, nargs="+", help="trainer.seed values (default 0 1; 0 with --quick)")
    p.add_argument("--steps", type=int, help="trainer.max_steps (default 600, the demo's; 40 with --quick)")
    p.add_argument("--eval-every", type=int, help="trainer.eval_every (default 100; 20 with --quick)")
    p.add_argument("--parallel", type=int, default=2, help="processes at once")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    p.add_argument("--write-md", metavar="PATH", help="write the result into this markdown file")
    p.add_argument("--json", metavar="PATH", help="write the runs as JSON")
    p.add_argument("--summarize", type=Path, nargs="+", metavar="RUN_DIR",
                   help="only tabulate existing run directories named {plain,dynamic}_seedS (e.g. of a stopped run)")
    args = p.parse_args(argv)
    args.argv = argv
    args.seeds = args.seeds or ([0] if args.quick else [0, 1])
    args.steps = args.steps or (40 if args.quick else 600)
    args.eval_every = args.eval_every or (20 if args.quick else 100)
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    started, load0 = time.perf_counter(), os.getloadavg()[0]
    if args.summarize:
        results = [read_run(d, int(d.name.rsplit("seed", 1)[1]), d.name.startswith("dynamic"))
                   for d in args.summarize]
    else:
        jobs = [(seed, dynamic) for seed in args.seeds for dynamic in (False, True)]
        with tempfile.TemporaryDirectory(prefix="bench_dynamic_") as tmp, ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(lambda j: run_one(Path(tmp), j[0], j[1], args.steps, args.eval_every,
                                                      args.timeout), jobs))
    body = report(args, results, (load0, os.getloadavg()[0]), time.perf_counter() - started)
    return publish(args, body, results, ("bench_dynamic", "Dynamic sampling"), any("error" in r for r in results))


if __name__ == "__main__":
    sys.exit(main())
