"""Training-inference mismatch corrections on the built-in demo, with a bf16 engine and a float32 trainer.

    python -m benchmarks.bench_mismatch                   # 20 steps, every mode, seeds 0 and 1
    python -m benchmarks.bench_mismatch --quick           # smoke run: 4 steps, none and truncate+mask, one seed
    python -m benchmarks.bench_mismatch --write-md BENCHMARKS.md

Each run (but ``fp32 engine``, the reference without a gap) is ``steadyrl train`` with no config (the demo: 2-layer model, warm-started, 8 prompts x 8
samples a step) with ``rollout.dtype=bfloat16`` (the HF engine samples with a bf16 copy of the
policy and reports its log-probs; the trainer is float32 on the CPU) and ``trainer.num_threads=1``,
in a fresh process, run in-process there so that the measurement can be timed: the child wraps
:func:`steadyrl.trainer.mismatch._measure` (the ``mismatch/*`` metrics, per domain included) and
``worst_tokens`` (the ``samples.jsonl`` tokens), the whole cost of measuring, and compares their
time with ``time/step_s``. The held-out set is evaluated greedily every ``--eval-every`` steps.

Per mode and seed: held-out accuracy before, along the run and after; the mean over the steps of
``mismatch/k3``, ``mismatch/ratio_max``, ``mismatch/ess``, and of the fractions truncated and
masked; and the measurement's share of the step time. The machine is shared: the load average
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

from .common import emit, machine, publish, run_child

MODES = {
    "fp32 engine": None,  # no rollout.dtype: the engine is the trainer's model, no gap, nothing measured
    "none": [],
    "truncate": ["rollout.correction.mode=truncate"],
    "mask": ["rollout.correction.mode=mask"],
    "truncate+mask": ["rollout.correction.mode=truncate+mask"],
    "sequence truncate": ["rollout.correction.mode=truncate", "rollout.correction.level=sequence"],
    "geometric": ["rollout.correction.mode=geometric"],
    "geometric+truncate": ["rollout.correction.mode=geometric+truncate"],
    "bypass": ["rollout.correction.bypass=true"],
}
AVERAGED = ("mismatch/k3", "mismatch/ratio_max", "mismatch/ess", "mismatch/truncated_frac",
            "mismatch/masked_token_frac", "mismatch/masked_seq_frac")


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--num-eval", type=int, default=200)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--modes", nargs="+", choices=sorted(MODES), default=list(MODES))
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--write-md", metavar="PATH")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--child", choices=sorted(MODES), help="run one mode in this process and print its RESULT")
    p.add_argument("--seed", type=int, default=0, help="the child's seed")
    p.add_argument("--out", type=Path, help="the child's run directory")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.eval_every, args.num_eval, args.seeds = 4, 0, 50, [0]
        args.modes = ["none", "truncate+mask"]
    return args


def _overrides(args, mode: str, seed: int) -> list[str]:
    common = [f"trainer.max_steps={args.steps}", "trainer.num_threads=1", f"trainer.eval_every={args.eval_every}",
              f"demo.num_eval={args.num_eval}", "eval.num_samples=0", "trainer.samples_every=0", f"trainer.seed={seed}"]
    return common if MODES[mode] is None else ["rollout.dtype=bfloat16", *common, *MODES[mode]]


def child(args) -> None:
    """One run in this process: the measurement's time per step, and the run's figures."""
    import steadyrl.trainer.mismatch as mismatch
    import steadyrl.recipe as recipe

    spent = [0.0]

    def timed(fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0
        return wrapper

    mismatch._measure = timed(mismatch._measure)
    recipe.worst_tokens = timed(recipe.worst_tokens)
    summary = recipe.train(None, _overrides(args, args.child, args.seed), output_dir=str(args.out), overwrite=True)
    rows = [json.loads(x) for x in (args.out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time/step_s" in r]
    curve = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
    emit({"before": summary["eval_before"]["accuracy"], "after": summary["eval_after"]["accuracy"],
          "curve": curve, "step_s": sum(r["time/step_s"] for r in steps), "measure_s": spent[0],
          "steps": len(steps), **{k: _mean([r[k] for r in steps if k in r]) for k in AVERAGED}})


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _cell(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report(args, results: dict, loads: tuple[float, float], seconds: float) -> str:
    lines = [f"Command: `python -m benchmarks.bench_mismatch{' --quick' if args.quick else ''}` "
             f"({args.steps} steps a run, seeds {', '.join(map(str, args.seeds))}, rollout.dtype=bfloat16 beside a "
             f"float32 trainer, held-out {args.num_eval} prompts greedy, eval every {args.eval_every}); "
             f"{seconds:.0f} s in all.", "",
             f"Machine: {machine(1)}. Load average {loads[0]:.1f} before, {loads[1]:.1f} after (shared machine, "
             "other jobs running).", "",
             "| mode | seed | accuracy before -> after | accuracy at step | k3 | ratio_max | ESS | truncated | "
             "masked tokens | masked seqs | measuring, % of step time |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (mode, seed), r in results.items():
        if "error" in r:
            lines.append(f"| {mode} | {seed} | error: {r['error']} |||||||||")
            continue
        curve = ", ".join(f"{acc:.2f} @ {s}" for s, acc in r["curve"][1:])
        share = 100 * r["measure_s"] / max(r["step_s"], 1e-9)
        cells = [_cell(r[k], spec) for k, spec in zip(AVERAGED, (".2e", ".3f", ".5f", ".4f", ".4f", ".4f"))]
        lines.append(f"| {mode} | {seed} | {r['before']:.3f} -> {r['after']:.3f} | {curve} | {' | '.join(cells)} | "
                     f"{share:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        child(args)
        return 0
    started, load0, results = time.perf_counter(), os.getloadavg()[0], {}
    with tempfile.TemporaryDirectory(prefix="bench_mismatch_") as tmp:
        for seed in args.seeds:
            for mode in args.modes:
                out = Path(tmp) / f"{mode.replace(' ', '_').replace('+', '_')}_{seed}"
                child_args = ["--child", mode, "--seed", str(seed), "--out", str(out), "--steps", str(args.steps),
                              "--eval-every", str(args.eval_every), "--num-eval", str(args.num_eval)]
                results[(mode, seed)] = run_child("benchmarks.bench_mismatch", child_args, args.timeout)
                print(mode, seed, json.dumps(results[(mode, seed)]), flush=True)
    body = report(args, results, (load0, os.getloadavg()[0]), time.perf_counter() - started)
    flat = {f"{mode} seed {seed}": r for (mode, seed), r in results.items()}
    return publish(args, body, flat, ("bench_mismatch", "Training-inference mismatch corrections"),
                   any("error" in r for r in results.values()))


if __name__ == "__main__":
    sys.exit(main())
