"""Helpers shared by the benchmarks (bench_logprobs, bench_trl, bench_scaling).

* :func:`machine`: one line describing the CPU, cores, memory and library versions;
* :func:`peak_rss_mib` / :func:`reset_peak_rss`: the process's peak resident set (``VmHWM``);
* :func:`run_steadyrl`: ``steadyrl.recipe.train`` in this process, timing every step from outside;
* :func:`run_child`: run ``python -m MODULE ARGS`` in a fresh process and read its ``RESULT {json}`` line;
* :func:`run_pairs`: the paired comparisons (bench_trl, bench_agents): a fresh process per run,
  the order of the sides alternating from pair to pair; :func:`median_of` for their tables;
* :func:`write_md`: replace (or append) one benchmark's marked block in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(x.split(":", 1)[1].strip() for x in f if x.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine(threads: int | None = None) -> str:
    """``"<cpu>, N cores, M GiB RAM, no GPU; Linux ..., Python ..., torch ..., transformers ..., trl ..."``."""
    import torch

    with open("/proc/meminfo") as f:
        ram = int(f.readline().split()[1]) / 2**20
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    th = f" ({threads} thread{'s' if threads != 1 else ''} per process)" if threads else ""
    return (f"{cpu_model()}, {os.cpu_count()} cores, {ram:.0f} GiB RAM, {gpu}; Linux {platform.release()}, "
            f"Python {platform.python_version()}, torch {torch.__version__}{th}, "
            f"transformers {_version('transformers')}, trl {_version('trl')}")


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def peak_rss_mib() -> float:
    """Peak resident set of this process since start (or since :func:`reset_peak_rss`), MiB."""
    return _status_mib("VmHWM")


def rss_mib() -> float:
    return _status_mib("VmRSS")


def reset_peak_rss() -> None:
    """Start a new peak: ``VmHWM`` becomes the current resident set."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def run_steadyrl(config_path: Path, output_dir: Path, keep: tuple[str, ...] = ()) -> tuple[list[dict], object]:
    """Run ``steadyrl.recipe.train(config_path)`` here; returns ``(steps, run)``.

    ``steps[i]`` holds the wall clock (``end``) and this process's CPU time (``cpu``) when step
    ``i + 1`` returned (so a difference of consecutive ends covers everything the loop does
    between two steps: logging, samples, trackers), the tokens the step processed (prompt +
    response), its mean reward and response length, steadyrl's own ``time/*`` metrics (wall
    seconds), the CPU seconds spent in the engine's ``generate`` (``generate_cpu_s``), the
    resident set before the step and the process's peak resident set after it (MiB), and under
    ``metrics`` the step's metrics named in ``keep`` (None where the step has none).
    ``run`` is the trainer's :class:`~steadyrl.assembly.setup.Run` (the trained policy).
    """
    import steadyrl.recipe as loop

    steps, holder, generate_cpu = [], {}, [0.0]
    inner, inner_build = loop.train_step, loop.build_engine

    def build_engine(*args, **kwargs):
        engine = inner_build(*args, **kwargs)
        generate = engine.generate

        def timed_generate(*a, **k):
            c0 = time.process_time()
            try:
                return generate(*a, **k)
            finally:
                generate_cpu[0] += time.process_time() - c0

        engine.generate = timed_generate
        return engine

    def timed_step(run, engine, step):
        rss_before = rss_mib()
        generate_cpu[0] = 0.0
        metrics, extras = inner(run, engine, step)
        holder["run"] = run
        steps.append({"end": time.perf_counter(), "cpu": time.process_time(), "generate_cpu_s": generate_cpu[0],
                      "rss_before_mib": rss_before, "peak_rss_mib": peak_rss_mib(),
                      "tokens": round(metrics["throughput/tokens_per_s"] * metrics["time/step_s"]),
                      "reward": metrics.get("reward/mean"), "length": metrics["response/length_mean"],
                      "length_max": metrics["response/length_max"],
                      "generate_s": metrics["time/generate_s"], "score_s": metrics["time/score_s"],
                      "update_s": metrics["time/update_s"], "metrics": {k: metrics.get(k) for k in keep}})
        return metrics, extras

    loop.train_step, loop.build_engine = timed_step, build_engine
    try:
        loop.train(str(config_path), [], output_dir=str(output_dir), overwrite=True)
    finally:
        loop.train_step, loop.build_engine = inner, inner_build
    return steps, holder["run"]


def run_child(module: str, args: list[str], timeout: float) -> dict:
    """Run ``python -m module *args`` from the repository root; its last ``RESULT {json}`` line,
    or ``{"error": ...}`` when it failed, printed nothing or ran past ``timeout`` seconds."""
    cmd = [sys.executable, "-m", module, *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:] or [f"exit status {proc.returncode}"]
        return {"error": " | ".join(tail)[:400]}
    return json.loads(lines[-1][len("RESULT "):])


def run_pairs(module: str, labels: list[str], args, child_args, summarize, on_pair) -> dict[str, list[dict]]:
    """``args.repeats`` pairs (seeds ``args.seed``, ``args.seed + 1``, ...): one fresh
    ``python -m module`` per label, in ``labels``' order in even pairs and reversed in odd ones so
    that neither side always runs first. A run's figures are ``summarize(result, args.warmup,
    args.last)`` (or its error) plus seed and wall time; ``on_pair(pair)`` gets each pair's figures
    by label. Returns every run's figures by label."""
    runs: dict[str, list[dict]] = {label: [] for label in labels}
    for i in range(args.repeats):
        seed, pair = args.seed + i, {}
        for label in labels if i % 2 == 0 else labels[::-1]:
            t0 = time.perf_counter()
            res = run_child(module, child_args(args, label, seed), args.timeout)
            fig = res if "error" in res else summarize(res, args.warmup, args.last)
            fig.update(seed=seed, wall_s=time.perf_counter() - t0)
            runs[label].append(fig)
            pair[label] = fig
            print(f"{label} seed {seed}: " + json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                                           for k, v in fig.items()}), flush=True)
        on_pair(pair)
    return runs


def pair_parser(doc: str, frameworks, *, steps: tuple[int, int], warmup: tuple[int, int],
                last: tuple[int, int], seed: int) -> argparse.ArgumentParser:
    """The options every paired benchmark takes; ``steps``, ``warmup``, ``last``: (full, --quick)
    defaults, applied by :func:`pair_defaults` after parsing. The caller adds its own."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"smoke run: one pair of {steps[1]} steps")
    p.add_argument("--steps", type=int, help=f"GRPO steps per run (default {steps[0]}; {steps[1]} with --quick)")
    p.add_argument("--repeats", type=int, help="pairs of runs, one seed each (default 3; 1 with --quick)")
    p.add_argument("--warmup", type=int,
                   help=f"steps left out of the timing medians (default {warmup[0]}; {warmup[1]} with --quick)")
    p.add_argument("--last", type=int,
                   help=f"rewards: mean over this many last steps (default {last[0]}; {last[1]} with --quick)")
    p.add_argument("--seed", type=int, default=seed, help="seed of the first pair; pair i uses seed + i")
    p.add_argument("--only", choices=frameworks, help="run one framework only")
    p.add_argument("--model-dir", type=Path, help="where the warm-started model goes (default: a temporary directory)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    p.add_argument("--write-md", metavar="PATH", help="write the result into this markdown file")
    p.add_argument("--json", metavar="PATH", help="write every run's figures as JSON")
    p.add_argument("--child", choices=frameworks, help="run one framework in this process and print its RESULT")
    p.set_defaults(pair_defaults={"steps": steps, "warmup": warmup, "last": last})
    return p


def pair_defaults(args, argv: list[str]):
    """``args`` with the unset counts of :func:`pair_parser` filled in (``--quick`` or not)."""
    args.argv = argv
    which = 1 if args.quick else 0  # (full, quick) pairs
    args.steps = args.steps or args.pair_defaults["steps"][which]
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.warmup = args.warmup if args.warmup is not None else args.pair_defaults["warmup"][which]
    args.last = args.last or args.pair_defaults["last"][which]
    return args


def median_of(values):
    """The median of the values that are not None (None when there are none)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def emit(result: dict) -> None:
    """What a child prints for :func:`run_child`."""
    print("RESULT " + json.dumps(result), flush=True)


def publish(args, body: str, results, block: tuple[str, str], failed: bool) -> int:
    """A benchmark's end: print the report, write ``results`` to ``--json`` and the report into
    ``--write-md`` (``block``: the marker name and the section title), and give the exit status
    (1 when some run ``failed``)."""
    print("\n" + body, flush=True)
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.write_md:
        write_md(Path(args.write_md), *block, body)
    return 1 if failed else 0


def write_md(path: Path, name: str, title: str, body: str) -> None:
    """Replace the block between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``;
    without one, append ``## title`` and the block (creating the file if needed)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if not path.exists():
        path.write_text("# Benchmarks\n\nEvery number here comes with the command that produced it and the "
                        f"machine it ran on.\n\n## {title}\n\n{block}\n")
        return
    text = path.read_text()
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## {title}\n\n{block}\n"
    path.write_text(text)
