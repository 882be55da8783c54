"""Run every benchmark: ``python -m benchmarks.run_all [--quick] [--only NAME ...] [--write-md PATH]``.

Each benchmark is a module with ``main(argv) -> int`` that accepts ``--quick`` and ``--write-md PATH``.
Adding one is adding one line to ``BENCHMARKS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

BENCHMARKS = {
    "logprobs": "benchmarks.bench_logprobs",
    "trl": "benchmarks.bench_trl",
    "scaling": "benchmarks.bench_scaling",
    "agents": "benchmarks.bench_agents",
    "dynamic": "benchmarks.bench_dynamic",
    "async": "benchmarks.bench_async",
    "mismatch": "benchmarks.bench_mismatch",
    "code_reward": "benchmarks.bench_code_reward",
    "smollm2": "benchmarks.bench_smollm2",
    "errors": "benchmarks.bench_errors",
    "algorithms": "benchmarks.bench_algorithms",
    "distill": "benchmarks.bench_distill",
    "vision": "benchmarks.bench_vision",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run of every benchmark")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these")
    parser.add_argument("--write-md", metavar="PATH", help="write each benchmark's section into PATH")
    args = parser.parse_args(argv)
    passthrough = (["--quick"] if args.quick else []) + (["--write-md", args.write_md] if args.write_md else [])
    status = 0
    for name in args.only or BENCHMARKS:
        print(f"\n### benchmark: {name}\n", flush=True)
        status |= importlib.import_module(BENCHMARKS[name]).main(passthrough)
    return status


if __name__ == "__main__":
    sys.exit(main())
