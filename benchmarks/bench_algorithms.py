"""The step-time cost of each newer algorithm switch on the built-in demo (docs/algorithms.md).

    python -m benchmarks.bench_algorithms                 # 40 steps per switch, seeds 0 and 1
    python -m benchmarks.bench_algorithms --quick         # 6 steps, one seed
    python -m benchmarks.bench_algorithms --write-md BENCHMARKS.md

Each run is ``steadyrl train`` with no config (the demo: 2-layer model, warm-started, GRPO) and
``trainer.num_threads=1``, in a fresh process, with one switch set. Per switch: the median over
steps (the first, which includes start-up, left out) of the CPU time of the update and of the whole
step, measured on the training thread (``time.thread_time``: with one thread, the work itself,
steady on a shared machine where wall time is not), and held-out accuracy after the run, each
against the plain GRPO runs of the same seeds. The machine is shared: the load
average before and after is printed with the table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import REPO, machine, write_md

SWITCHES = {
    "grpo (baseline)": [],
    "sapo": ["algorithm.policy_loss=sapo"],
    "kl_cov": ["algorithm.policy_loss=kl_cov"],
    "clip_cov": ["algorithm.policy_loss=clip_cov"],
    "top_entropy_quantile=0.2": ["algorithm.top_entropy_quantile=0.2"],
    "overlong_buffer=1": ["algorithm.overlong_buffer=1"],  # the demo: max 8 tokens, answers up to 7
}


def _recipe_module():
    """The module whose ``train`` calls ``train_step`` and ``ppo_update`` by their global names."""
    for name in ("steadyrl.recipe", "steadyrl.trainer.recipe"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "train_step") and hasattr(module, "ppo_update"):
            return module
    raise ImportError("no recipe module with train_step and ppo_update")


def _child(name: str, steps: int, seed: int, out: str) -> int:
    """One run in this process; the update's and the step's CPU time (this thread's: steady under load)."""
    module = _recipe_module()
    cpu: dict[str, list[float]] = {"update": [], "step": []}

    def timed(fn, key):
        def wrapper(*args, **kwargs):
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu[key].append(time.thread_time() - start)
        return wrapper

    module.ppo_update = timed(module.ppo_update, "update")
    module.train_step = timed(module.train_step, "step")
    from steadyrl.cli import main as cli

    argv = ["train", "--output-dir", out, "--overwrite", f"trainer.max_steps={steps}", f"trainer.seed={seed}",
            "trainer.num_threads=1", *SWITCHES[name]]
    if cli(argv) != 0:
        return 1
    summary = json.loads((Path(out) / "summary.json").read_text())
    later = slice(1, None)  # the first step includes start-up work
    print("RESULT " + json.dumps({
        "update_s": statistics.median(cpu["update"][later]), "step_s": statistics.median(cpu["step"][later]),
        "accuracy": (summary.get("eval_after") or {}).get("accuracy")}), flush=True)
    return 0


def _run(name: str, steps: int, seed: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.bench_algorithms", "--child", name, "--steps", str(steps),
           "--seed", str(seed), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _accuracies(rs: list[dict]) -> str:
    return ", ".join(f"{r['accuracy']:.3f}" for r in rs if r.get("accuracy") is not None)


def _table(results: dict[str, list[dict]]) -> list[str]:
    base = results["grpo (baseline)"]

    def med(rs, key):
        vals = [r[key] for r in rs if r.get(key) is not None]
        return statistics.median(vals) if vals else float("nan")

    lines = ["| switch | update, CPU s (median) | step, CPU s (median) | update vs GRPO | step vs GRPO | held-out accuracy |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, rs in results.items():
        lines.append(f"| {name} | {med(rs, 'update_s'):.4f} | {med(rs, 'step_s'):.4f} "
                     f"| {med(rs, 'update_s') / med(base, 'update_s'):.2f}x "
                     f"| {med(rs, 'step_s') / med(base, 'step_s'):.2f}x | {_accuracies(rs)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--switches", nargs="+", choices=sorted(SWITCHES), default=list(SWITCHES))
    p.add_argument("--write-md", metavar="PATH")
    p.add_argument("--child", choices=sorted(SWITCHES), help="run one switch in this process, print its RESULT")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out")
    args = p.parse_args(argv)
    if args.child:
        return _child(args.child, args.steps, args.seed, args.out)
    steps, seeds = (6, [0]) if args.quick else (args.steps, args.seeds)
    names = ["grpo (baseline)", *[s for s in args.switches if s != "grpo (baseline)"]]
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:  # interleaved, so a change of load hits every switch alike
            for name in names:
                results[name].append(_run(name, steps, seed, Path(tmp) / f"{seed}-{name}"))
                print(f"{name} seed {seed}: {results[name][-1]}", flush=True)
    lines = [f"`python -m benchmarks.bench_algorithms --steps {steps} --seeds {' '.join(map(str, seeds))}`; "
             f"{machine(threads=1)}; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after.", "",
             *_table(results)]
    print("\n".join(lines))
    if args.write_md:
        write_md(Path(args.write_md), "algorithms", "The newer algorithms' switches on the demo (step-time cost)",
                 "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
