"""The step-time cost of each newer algorithm switch on the built-in demo (docs/algorithms.md).

    python -m benchmarks.bench_algorithms                 # 40 steps per switch, seeds 0 and 1
    python -m benchmarks.bench_algorithms --quick         # 6 steps, one seed
    python -m benchmarks.bench_algorithms --write-md BENCHMARKS.md

Each run is ``steadyrl train`` with no config (the demo: 2-layer model, warm-started, GRPO) and
``trainer.num_threads=1``, in a fresh process, with one switch set. Per switch: the median over
steps (the first, which includes start-up, left out) of ``time/update_s`` and ``time/step_s``, the
process's CPU seconds per step (steadier than wall time on a shared machine) and held-out accuracy
after the run, each against the plain GRPO runs of the same seeds. The machine is shared: the load
average before and after is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import REPO, machine, write_md

SWITCHES = {
    "grpo (baseline)": [],
    "sapo": ["algorithm.policy_loss=sapo"],
    "kl_cov": ["algorithm.policy_loss=kl_cov"],
    "clip_cov": ["algorithm.policy_loss=clip_cov"],
    "top_entropy_quantile=0.2": ["algorithm.top_entropy_quantile=0.2"],
    "overlong_buffer=4": ["algorithm.overlong_buffer=4"],
}


def _run(overrides: list[str], steps: int, seed: int, out: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [sys.executable, "-m", "steadyrl", "train", "--output-dir", str(out), "--overwrite",
           f"trainer.max_steps={steps}", f"trainer.seed={seed}", "trainer.num_threads=1", *overrides]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps_rows = [r for r in rows if "time/step_s" in r][1:]
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"update_s": statistics.median(r["time/update_s"] for r in steps_rows),
            "step_s": statistics.median(r["time/step_s"] for r in steps_rows),
            "cpu_s_per_step": cpu / steps,
            "accuracy": summary.get("eval_after", {}).get("accuracy")}


def _table(results: dict[str, list[dict]]) -> list[str]:
    base = results["grpo (baseline)"]

    def med(rs, key):
        vals = [r[key] for r in rs if r.get(key) is not None]
        return statistics.median(vals) if vals else float("nan")

    lines = ["| switch | update s (median) | step s (median) | CPU s / step | vs GRPO: update | vs GRPO: CPU | held-out accuracy |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, rs in results.items():
        lines.append(f"| {name} | {med(rs, 'update_s'):.4f} | {med(rs, 'step_s'):.4f} | {med(rs, 'cpu_s_per_step'):.3f} "
                     f"| {med(rs, 'update_s') / med(base, 'update_s'):.2f}x | "
                     f"{med(rs, 'cpu_s_per_step') / med(base, 'cpu_s_per_step'):.2f}x | "
                     f"{', '.join(f'{r['accuracy']:.3f}' for r in rs if r.get('accuracy') is not None)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--switches", nargs="+", choices=sorted(SWITCHES), default=list(SWITCHES))
    p.add_argument("--write-md", metavar="PATH")
    args = p.parse_args(argv)
    steps, seeds = (6, [0]) if args.quick else (args.steps, args.seeds)
    names = ["grpo (baseline)", *[s for s in args.switches if s != "grpo (baseline)"]]
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:  # interleaved, so a change of load hits every switch alike
            for name in names:
                results[name].append(_run(SWITCHES[name], steps, seed, Path(tmp) / f"{seed}-{len(results[name])}"))
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
