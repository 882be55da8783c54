"""The ``steadyrl`` command line: argument parsing only; the work lives in the layers below."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="steadyrl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("selfcheck", help="numerical self-check of the functional core")
    train = sub.add_parser("train", help="RL post-training (the built-in demo when no config is given)")
    train.add_argument("config", nargs="?")
    train.add_argument("--output-dir")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("selfcheck", "train"):
        from .selfcheck import main as selfcheck

        return selfcheck()
    return 2


if __name__ == "__main__":
    sys.exit(main())
