"""The ``steadyrl`` command line: argument parsing only; the work lives in the layers below.

    steadyrl train [CONFIG.yaml] [--output-dir DIR] [--resume] [--overwrite] [key=value ...]
    steadyrl eval [CONFIG.yaml] [--output-dir DIR [--trust-run-code] | --model PATH] [key=value ...]
    steadyrl plot RUN_DIR [RUN_DIR ...] [--out FILE]
    steadyrl config show [CONFIG.yaml] [key=value ...]
    steadyrl selfcheck

Exit status: 0 on success, 2 on a configuration or input error (one message on stderr naming
the field), 1 on a run-time failure.
"""

from __future__ import annotations

import argparse
import sys

from .errors import ConfigError, TrainingHalted


def _split_config_and_overrides(items: list[str]) -> tuple[str | None, list[str]]:
    config, overrides = None, []
    for item in items:
        if "=" in item:
            overrides.append(item)
        elif config is None:
            config = item
        else:
            raise ConfigError(f"unexpected argument {item!r}: give one config file and key=value overrides")
    return config, overrides


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="steadyrl", description="Numerically stable RL post-training "
                                     "(PPO, GRPO and relatives) for causal language models.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="RL post-training; with no config, the built-in demo")
    train.add_argument("items", nargs="*", metavar="CONFIG|key=value",
                       help="an optional YAML config, then dotted overrides such as algorithm.pg_clip=0.1")
    train.add_argument("--output-dir", help="run directory (default: runs/<preset>-<time>)")
    again = train.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --output-dir")
    again.add_argument("--overwrite", action="store_true", help="replace a previous run in --output-dir")

    ev = sub.add_parser("eval", help="evaluate a run's policy or a model on the held-out prompts")
    ev.add_argument("items", nargs="*", metavar="CONFIG|key=value")
    group = ev.add_mutually_exclusive_group()
    group.add_argument("--output-dir", help="a run directory: its config and newest checkpoint")
    group.add_argument("--model", help="a model directory or hub name to evaluate")
    ev.add_argument("--trust-run-code", action="store_true",
                    help="with --output-dir and no CONFIG: run the code the run's config.yaml names (reward "
                         "functions from files or modules, model.trust_remote_code); without it such a run "
                         "directory is refused, since it may come from someone else. Built-in rewards need no flag")

    plot = sub.add_parser("plot", help="PNG dashboard of one or more runs' metrics")
    plot.add_argument("run_dirs", nargs="+")
    plot.add_argument("--out", help="output PNG (default: RUN_DIR/dashboard.png)")

    config = sub.add_parser("config", help="inspect configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser("show", help="print the resolved config with every default and its help")
    show.add_argument("items", nargs="*", metavar="CONFIG|key=value")

    sub.add_parser("selfcheck", help="numerical self-check of the functional core")
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.command == "selfcheck":
        from .selfcheck import main as selfcheck

        return selfcheck()
    if args.command == "plot":
        from .plot import plot_cli

        return plot_cli(args.run_dirs, args.out)
    path, overrides = _split_config_and_overrides(args.items)
    if args.command == "config":
        from .config import config_notes, load_config, render_config

        config, preset_keys = load_config(path, overrides, with_sources=True)
        for note in config_notes(config):
            print(f"# note: {note}")
        print(render_config(config, preset_keys), end="")
        return 0
    if args.command == "train":
        from .trainer import train

        if (args.resume or args.overwrite) and not args.output_dir:
            flag = "--resume" if args.resume else "--overwrite"
            raise ConfigError(f"{flag} needs --output-dir RUN_DIR: the run to {'continue' if args.resume else 'replace'}")
        train(path, overrides, output_dir=args.output_dir, resume=args.resume, overwrite=args.overwrite)
        return 0
    if args.command == "eval":
        from .trainer import evaluate_run

        evaluate_run(path, overrides, output_dir=args.output_dir, model=args.model,
                     trust_run_code=args.trust_run_code)
        return 0
    raise AssertionError(args.command)


def _one_line(exc: BaseException) -> str:
    """The message on one line: an input error is one line on stderr, even when it quotes a
    multi-line message (a user's reward module raising on import, a library's error)."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def _quiet_libraries() -> None:
    """transformers' own progress bars (loading / writing weights) drown steadyrl's output."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``, accepting the config file and ``key=value`` overrides anywhere on the line.

    argparse fills a ``nargs="*"`` positional from one run of arguments only, so in
    ``train cfg.yaml --output-dir run key=value`` the override would be "unrecognized"; those
    leftovers are put back with the others (the order of config and overrides is free anyway).
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "items") and not any(item.startswith("-") for item in extra):
        args.items = [*args.items, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    _quiet_libraries()
    try:
        return _run(args)
    except ConfigError as exc:
        print(f"steadyrl: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except TrainingHalted as exc:
        print(f"steadyrl: training stopped: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("steadyrl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
