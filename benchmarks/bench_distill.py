"""On-policy distillation on the demo: a wider, GRPO-trained teacher distils into the demo's model,
against GRPO alone at equal steps, with held-out accuracy and the wall time of the training steps.

    python -m benchmarks.bench_distill                       # teacher 150 steps; arms 60 steps, seeds 0 1
    python -m benchmarks.bench_distill --quick               # smoke run: teacher 20 steps, arms 10 steps, seed 0
    python -m benchmarks.bench_distill --teacher-dir DIR     # reuse a teacher (a checkpoint's policy/ directory)

1. **Teacher**: ``steadyrl train`` on the demo with a wider, deeper model (``demo.hidden_size``,
   ``demo.n_layers``; the same character tokenizer), ``--teacher-steps`` GRPO steps; its last
   checkpoint's ``policy/`` is the teacher.
2. **Arms** (a fresh process each, the demo's default model, ``--steps`` steps, eval every
   ``--eval-every``): ``grpo`` (the demo as it is), ``opd_mixed`` (the teacher's per-token reward
   beside the task reward, ``reinforce_plus_plus``), ``opd_pure`` (the teacher alone,
   ``teacher.task_rewards=false``, ``reinforce_plus_plus``).

Per run and eval point: the step, the training wall seconds up to it (the sum of ``time/step_s``; the
evaluation's time is left out of every arm) and ``eval/accuracy``; per run the median step time and
the teacher metrics. Prints a JSON line per run and a markdown table at the end.
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

from .common import REPO, machine

ARMS = {
    "grpo": [],
    "opd_mixed": ["algorithm.advantage_estimator=reinforce_plus_plus", "teacher.distill_coef=0.5"],
    "opd_pure": ["algorithm.advantage_estimator=reinforce_plus_plus", "teacher.task_rewards=false",
                 "algorithm.kl_mode=none"],
}


def _train(run_dir: Path, overrides: list[str], timeout: float) -> tuple[float, str | None]:
    cmd = [sys.executable, "-m", "steadyrl", "train", "--output-dir", str(run_dir), "--overwrite", *overrides]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - started, f"timed out after {timeout:.0f} s"
    error = None if proc.returncode == 0 else " | ".join(proc.stderr.strip().splitlines()[-3:])[:400]
    return time.perf_counter() - started, error


def build_teacher(out: Path, steps: int, hidden: int, layers: int, timeout: float) -> Path:
    run_dir = out / "teacher"
    wall, error = _train(run_dir, [f"trainer.max_steps={steps}", f"trainer.save_every={steps}", "trainer.seed=100",
                                   f"demo.hidden_size={hidden}", f"demo.n_layers={layers}",
                                   f"trainer.eval_every={steps}"], timeout)
    if error:
        raise SystemExit(f"teacher run failed: {error}")
    checkpoints = sorted((run_dir / "checkpoints").glob("step_*"))
    accuracy = [r.get("eval/accuracy") for r in _rows(run_dir) if "eval/accuracy" in r]
    print(json.dumps({"teacher": str(checkpoints[-1] / "policy"), "wall_s": round(wall, 1), "steps": steps,
                      "hidden_size": hidden, "n_layers": layers, "eval_accuracy": accuracy}), flush=True)
    return checkpoints[-1] / "policy"


def _rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def run_arm(out: Path, arm: str, seed: int, teacher: Path, steps: int, eval_every: int, timeout: float) -> dict:
    overrides = [f"trainer.seed={seed}", f"trainer.max_steps={steps}", f"trainer.eval_every={eval_every}",
                 "trainer.save_every=0", *ARMS[arm]]
    if arm != "grpo":
        overrides.append(f"teacher.name_or_path={teacher}")
    run_dir = out / f"{arm}_seed{seed}"
    wall, error = _train(run_dir, overrides, timeout)
    train_s, curve, step_s, rkl = 0.0, [], [], []
    for r in _rows(run_dir):
        train_s += r.get("time/step_s", 0.0)
        if "time/step_s" in r:
            step_s.append(r["time/step_s"])
        if "distill/reverse_kl" in r:
            rkl.append(r["distill/reverse_kl"])
        if "eval/accuracy" in r:
            curve.append((r.get("step", 0), round(train_s, 1), r["eval/accuracy"]))
    return {"arm": arm, "seed": seed, "wall_s": round(wall, 1), "error": error, "curve": curve,
            "median_step_s": round(statistics.median(step_s), 3) if step_s else None,
            "reverse_kl_first_last": [round(rkl[0], 3), round(rkl[-1], 3)] if rkl else None}


def table(results: list[dict]) -> str:
    lines = ["| arm | seed | step | training wall s (cumulative) | eval/accuracy |", "|---|---:|---:|---:|---:|"]
    for r in results:
        for step, wall, acc in r["curve"]:
            lines.append(f"| {r['arm']} | {r['seed']} | {step} | {wall} | {acc:.3f} |")
    lines += ["", "| arm | seed | median step s | distill/reverse_kl first -> last | error |", "|---|---:|---:|---|---|"]
    for r in results:
        kl = r["reverse_kl_first_last"]
        lines.append(f"| {r['arm']} | {r['seed']} | {r['median_step_s']} | "
                     f"{'' if kl is None else f'{kl[0]} -> {kl[1]}'} | {r['error'] or ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--teacher-steps", type=int, default=150)
    p.add_argument("--teacher-hidden", type=int, default=192)
    p.add_argument("--teacher-layers", type=int, default=3)
    p.add_argument("--teacher-dir", type=Path)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--out", type=Path)
    p.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.eval_every, args.teacher_steps = [0], 10, 5, 20
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_distill_"))
    print(machine(), flush=True)
    started = time.perf_counter()
    teacher = args.teacher_dir or build_teacher(out, args.teacher_steps, args.teacher_hidden, args.teacher_layers,
                                                args.timeout)
    results = []
    for seed in args.seeds:
        for arm in args.arms:
            results.append(run_arm(out, arm, seed, teacher, args.steps, args.eval_every, args.timeout))
            print(json.dumps(results[-1]), flush=True)
    print(f"\nWhole benchmark: {(time.perf_counter() - started) / 60:.1f} min\n")
    print(table(results))
    return 0 if all(r["error"] is None for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
