"""How long a bad input takes to be refused: ``python -m benchmarks.bench_errors [--quick] [--repeats N]
[--source DIR] [--write-md PATH]``.

Each case is a whole ``python -m steadyrl ...`` process with one thing wrong (issue 24, item 6): a
missing data file, a missing column, a missing model directory, a reward spec naming no file, a
tool spec naming no file, a run directory another process holds the lock of, and ``eval --model``
with no held-out data. Every case must end with exit status 2 and one ``steadyrl: error:`` line;
the table gives the median (and min) wall time over ``--repeats`` fresh processes, and whether
torch was imported before the error was printed (a second, untimed run of the case with a
wrapper that reports ``'torch' in sys.modules``). ``--source DIR`` times another checkout's
``steadyrl`` (put first on ``PYTHONPATH``), e.g. the code before the checks moved ahead of torch.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import REPO, write_md

WRAPPER = ("import sys; from steadyrl.cli import main; code = main(sys.argv[1:]); "
           "print('TORCH_IMPORTED', 'torch' in sys.modules, file=sys.stderr); sys.exit(code)")


def make_inputs(root: Path) -> dict[str, list[str]]:
    """The files the cases read, under ``root``, and each case's ``steadyrl`` arguments."""
    model = root / "model"  # what check_model_source accepts: a save_pretrained layout (never loaded here)
    model.mkdir()
    (model / "config.json").write_text("{}")
    (root / "data.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                                             for i in range(64)))
    (root / "no_prompt.jsonl").write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")
    base = {"model": {"name_or_path": str(model)},
            "data": {"train_path": str(root / "data.jsonl"), "eval_path": str(root / "data.jsonl")}}
    (root / "cfg.yaml").write_text(json.dumps(base))  # JSON is YAML
    busy = root / "busy_run"
    busy.mkdir()
    cfg = str(root / "cfg.yaml")
    return {
        "missing data file": ["train", cfg, f"data.train_path={root / 'nope.jsonl'}"],
        "missing column": ["train", cfg, f"data.train_path={root / 'no_prompt.jsonl'}"],
        "missing model directory": ["train", cfg, f"model.name_or_path={root / 'no_model'}"],
        "bad reward spec": ["train", cfg, f"rewards=[{{name: {root / 'nope.py'}:score}}]"],
        "bad tool spec": ["train", cfg, f"rollout.multi_turn.tools=[{root / 'nope.py'}:add]"],
        "run directory in use": ["train", cfg, "--output-dir", str(busy), "--overwrite"],
        "eval --model, no held-out data": ["eval", "--model", str(model)],
    }


def hold_lock(run_dir: Path) -> subprocess.Popen:
    """A process that holds ``run_dir``'s lock as a running ``steadyrl train`` does, until killed."""
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.lockf(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode()); print('held', flush=True); "
            "time.sleep(3600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(run_dir / ".steadyrl-lock")], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def run_case(args: list[str], env: dict, *, wrapped: bool = False) -> tuple[float, subprocess.CompletedProcess]:
    """Run in the inputs' folder: from the checkout's, ``-m`` and ``-c`` would import its steadyrl
    (the current directory comes first on ``sys.path``), not ``--source``'s."""
    command = [sys.executable, "-c", WRAPPER, *args] if wrapped else [sys.executable, "-m", "steadyrl", *args]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=env["BENCH_CWD"])
    return time.perf_counter() - start, done


def cpu_seconds() -> float:
    """User + system CPU time of the finished child processes so far (less sensitive than wall
    time to other jobs on a loaded machine)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(cases: dict[str, list[str]], env: dict, repeats: int) -> list[dict]:
    rows = []
    for name, args in cases.items():
        _, probe = run_case(args, env, wrapped=True)
        errors = [line for line in probe.stderr.splitlines() if line.startswith("steadyrl: error:")]
        if probe.returncode != 2 or len(errors) != 1:
            raise SystemExit(f"case {name!r}: exit {probe.returncode}, stderr:\n{probe.stderr}")
        times, cpu = [], []
        for _ in range(repeats):
            before = cpu_seconds()
            times.append(run_case(args, env)[0])
            cpu.append(cpu_seconds() - before)
        rows.append({"case": name, "median_s": statistics.median(times), "min_s": min(times),
                     "cpu_s": statistics.median(cpu),
                     "torch": "TORCH_IMPORTED True" in probe.stderr, "error": errors[0][len("steadyrl: error: "):]})
        print(f"{name}: median {rows[-1]['median_s']:.2f} s, min {rows[-1]['min_s']:.2f} s, "
              f"CPU {rows[-1]['cpu_s']:.2f} s, "
              f"torch imported: {rows[-1]['torch']}; {errors[0][:110]}", flush=True)
    return rows


def baseline_s(env: dict, repeats: int) -> float:
    """The floor: ``python -c 'import steadyrl.cli'``, what every command pays."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import steadyrl.cli"], env=env, check=True, cwd=env["BENCH_CWD"])
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def table(rows: list[dict], floor: float, command: str, source: Path, repeats: int) -> str:
    load = os.getloadavg()
    where = "this checkout" if source.resolve() == REPO.resolve() else f"the checkout {source}"
    lines = [f"Command: `{command}`", "",
             f"steadyrl from {where}; {os.cpu_count()} cores, maybe shared with other jobs (load average "
             f"1/5/15 min at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}), so the times are "
             f"upper bounds of a quiet machine's (the CPU time, user + system of the process, is what the "
             f"command itself used); median and min of {repeats} fresh processes per case; "
             f"`python -c 'import steadyrl.cli'` alone: {floor:.2f} s (median).", "",
             "| bad input | wall median (s) | wall min (s) | CPU median (s) | torch imported | the error (start) |",
             "|---|---:|---:|---:|---|---|"]
    for r in rows:
        text = r["error"][:90].replace("|", "\\|") + ("..." if len(r["error"]) > 90 else "")
        lines.append(f"| {r['case']} | {r['median_s']:.2f} | {r['min_s']:.2f} | {r['cpu_s']:.2f} "
                     f"| {'yes' if r['torch'] else 'no'} "
                     f"| {text} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one timed run per case")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per case (default 5)")
    parser.add_argument("--source", type=Path, default=REPO, help="the checkout whose steadyrl is timed")
    parser.add_argument("--write-md", metavar="PATH", help="write the table into PATH (BENCHMARKS.md)")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    env = {**os.environ, "PYTHONPATH": str(args.source.resolve()), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="bench_errors_") as tmp:
        env["BENCH_CWD"] = tmp
        cases = make_inputs(Path(tmp))
        holder = hold_lock(Path(tmp) / "busy_run")
        try:
            rows = measure(cases, env, repeats)
        finally:
            holder.kill()
            holder.wait()
        floor = baseline_s(env, repeats)
    command = "python -m benchmarks.bench_errors" + (" --quick" if args.quick else f" --repeats {repeats}")
    if args.source.resolve() != REPO:
        command += f" --source {args.source}"
    body = table(rows, floor, command, args.source, repeats)
    print(body)
    if args.write_md:
        write_md(Path(args.write_md), "bench_errors", "Bad input: time to the error", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
