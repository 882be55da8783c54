"""The ``steadyrl`` command line: argument parsing only; the work lives in the layers below.

    steadyrl train [CONFIG.yaml] [--output-dir DIR] [--resume [--trust-run-code]] [--overwrite] [key=value ...]
    steadyrl eval [CONFIG.yaml] [--output-dir DIR [--step N] [--trust-run-code] | --model PATH] [key=value ...]
    steadyrl plot RUN_DIR [RUN_DIR ...] [--out FILE]
    steadyrl export RUN_DIR [OUT] [--overwrite] [--step N] [--merge-lora] [--trust-run-code]
                    [--push-to-hub REPO [--public]]
    steadyrl doctor RUN_DIR [--output FILE] [--set NAME=VALUE ...]
    steadyrl doctor CONFIG.yaml [key=value ...] [--batches N] [--prompts N] [--tolerance X] [--trust-run-code]
    steadyrl config show [CONFIG.yaml] [key=value ...] [--trust-run-code]
    steadyrl convert GGUF OUT_DIR [--dtype float32|bfloat16|float16] [--overwrite]
    steadyrl selfcheck

Exit status: 0 on success (doctor: a healthy run; 1 when it found a problem), 2 on a configuration or input error (one message on stderr naming
the field), 1 on a run-time failure.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import __version__
from .errors import ConfigError, TrainingHalted
from .secrets import redact_text

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"


def _epilog() -> str:
    """Where to read more, at the foot of every ``--help`` page."""
    docs = DOCS_DIR if DOCS_DIR.is_dir() else "docs/ in the steadyrl source tree"
    return ("every config key with its value, default and help: "
            "steadyrl config show [CONFIG.yaml] [key=value ...]\n"
            f"documentation: {docs} (configuration.md, data.md, rewards.md, metrics.md, tracking.md, "
            "migrating.md from TRL and verl, troubleshooting.md, stability.md)")


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
    page = {"epilog": _epilog(), "formatter_class": argparse.RawDescriptionHelpFormatter}
    parser = argparse.ArgumentParser(prog="steadyrl", description="Numerically stable RL post-training "
                                     "(PPO, GRPO and relatives) for causal language models.", **page)
    parser.add_argument("--version", action="version", version=f"steadyrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="RL post-training; with no config, the built-in demo", **page)
    train.add_argument("items", nargs="*", metavar="CONFIG|key=value",
                       help="an optional YAML config, then dotted overrides such as algorithm.pg_clip=0.1")
    train.add_argument("--output-dir", help="run directory (default: runs/<preset>-<time>)")
    again = train.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --output-dir")
    again.add_argument("--overwrite", action="store_true", help="replace a previous run in --output-dir")
    train.add_argument("--trust-run-code", action="store_true",
                       help="with --resume and no CONFIG: run the code the run's config.yaml names although it is "
                            "not recorded as yours (a run train started here is; docs/rewards.md, Whose code runs)")

    ev = sub.add_parser("eval", help="evaluate a run's policy or a model on the held-out prompts", **page)
    ev.add_argument("items", nargs="*", metavar="CONFIG|key=value")
    group = ev.add_mutually_exclusive_group()
    group.add_argument("--output-dir", help="a run directory: its config and newest checkpoint")
    group.add_argument("--model", help="a model directory or hub name to evaluate")
    ev.add_argument("--step", type=int, help="with --output-dir: the checkpoint of this step (default: the newest)")
    ev.add_argument("--completions", metavar="FILE",
                    help="write each held-out prompt's greedy completion to FILE (JSONL: prompt, completion, "
                         "reward, correct, and set with data.eval_sources), to read what the policy answers")
    ev.add_argument("--trust-run-code", action="store_true",
                    help="with --output-dir and no CONFIG: run the code the run's config.yaml names (reward "
                         "functions from files or modules, model.trust_remote_code); without it such a run "
                         "directory is refused unless train recorded it as yours here, since it may come from "
                         "someone else. Built-in rewards need no flag")

    plot = sub.add_parser("plot", help="PNG dashboard of one or more runs' metrics", **page)
    plot.add_argument("run_dirs", nargs="+")
    plot.add_argument("--out", help="output PNG (default: RUN_DIR/dashboard.png; with several runs: "
                      "comparison.png in the current directory)")

    export = sub.add_parser("export", help="write a checkpoint's policy as a plain Hugging Face model directory "
                            "(train writes the last one to RUN_DIR/final)", **page)
    export.add_argument("run_dir", metavar="RUN_DIR", help="a steadyrl train output directory")
    export.add_argument("out", metavar="OUT", nargs="?",
                        help="the directory to write (an existing one only with --overwrite); optional with "
                             "--push-to-hub")
    export.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    export.add_argument("--step", type=int, help="the checkpoint of this step (default: the newest)")
    export.add_argument("--merge-lora", action="store_true",
                        help="LoRA runs: merge the adapter into the base model's weights (the adapter is kept in "
                             "OUT/adapter); without it OUT holds the adapter alone")
    export.add_argument("--trust-run-code", action="store_true",
                        help="with --merge-lora: load the base model although the run's config.yaml sets "
                             "model.trust_remote_code (the run directory may come from someone else)")
    export.add_argument("--push-to-hub", metavar="REPO",
                        help="upload the exported model to the Hugging Face Hub model repository REPO (NAME or "
                             "OWNER/NAME; created if needed). Without OUT and --step: RUN_DIR/final, the model "
                             "train wrote; else what is exported. Needs a token with write access")
    export.add_argument("--token", help="the Hub token for --push-to-hub (default: HF_TOKEN, or the one "
                        "huggingface-cli login saved; prefer those: a command line is visible to other users)")
    visibility = export.add_mutually_exclusive_group()
    visibility.add_argument("--private", action="store_true",
                            help="with --push-to-hub: create the repository private (the default)")
    visibility.add_argument("--public", action="store_true",
                            help="with --push-to-hub: create the repository public (default: private)")

    doctor = sub.add_parser("doctor", help="triage a run (RUN_DIR: what went wrong, with evidence and the change to "
                            "make) or check a setup before a run (CONFIG.yaml [key=value ...]: the gap between "
                            "engine and trainer log-probs and its causes); exit 0 healthy, 1 a problem found "
                            "(docs/stability.md)", **page)
    doctor.add_argument("target", metavar="RUN_DIR|CONFIG", help="a steadyrl train output directory (only read), or "
                        "a config file (.yaml) for the pre-flight")
    doctor.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (pre-flight only)")
    doctor.add_argument("--output", help="write the markdown report to this file (default: stdout)")
    doctor.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="change a detector threshold, e.g. entropy_collapse_ratio=0.2 (repeatable; "
                             "docs/stability.md lists them; RUN_DIR only)")
    doctor.add_argument("--batches", type=int, default=2, help="pre-flight: batches sampled (default 2)")
    doctor.add_argument("--prompts", type=int, default=2, help="pre-flight: prompts per batch, each sampled "
                        "rollout.group_size times (default 2)")
    doctor.add_argument("--tolerance", type=float, default=1e-3, help="pre-flight: a cause removing less than this "
                        "mean |log-ratio| per token is ruled out (default 1e-3)")
    doctor.add_argument("--trust-run-code", action="store_true", help="pre-flight of a CONFIG.yaml: allow the code it "
                        "names (reward files, tools, environments, parsers, the model's own files) to load; without "
                        "it a config not recorded as yours is refused, marker or not")

    config = sub.add_parser("config", help="inspect configuration", **page)
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser("show", help="print the resolved config with every default and its help; with no "
                                 "CONFIG the defaults, and with demo.task=reverse|tool|vision the built-in demo's",
                                 **page)
    show.add_argument("items", nargs="*", metavar="CONFIG|key=value")
    show.add_argument("--trust-run-code", action="store_true",
                      help="also load rollout.multi_turn.tools / tool_parser / environment to check them as train "
                           "does (this "
                           "imports and runs their files); without it they are checked without running anything")

    convert = sub.add_parser("convert", help="a GGUF file (llama.cpp) into a model directory for "
                             "model.name_or_path: de-quantised weights, tokenizer, chat template", **page)
    convert.add_argument("gguf", metavar="GGUF", help="the .gguf file (needs the gguf extra)")
    convert.add_argument("out_dir", metavar="OUT_DIR", help="directory to write (save_pretrained layout)")
    convert.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                         help="dtype of the saved weights (default float32: the de-quantised values exactly)")
    convert.add_argument("--overwrite", action="store_true", help="replace the files of a non-empty OUT_DIR")

    sub.add_parser("selfcheck", help="numerical self-check of the functional core", **page)
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.command == "selfcheck":
        from .selfcheck import main as selfcheck

        return selfcheck()
    if args.command == "plot":
        from .plot import plot_cli

        return plot_cli(args.run_dirs, args.out)
    if args.command == "doctor":
        return _doctor(args)
    if args.command == "convert":
        return _convert(args)
    if args.command == "export":
        return _export(args)
    path, overrides = _split_config_and_overrides(args.items)
    if args.command == "config":
        from .config import config_notes, load_config, render_config

        # no config file: the defaults, unless a demo.* key asks for the built-in demo's config
        demo = path is None and any(item.startswith("demo.") for item in overrides)
        config, preset_keys = load_config(path, overrides, with_sources=True, demo=demo)
        if args.trust_run_code:  # rollout.multi_turn.tools / tool_parser / environment loaded, as train checks them
            from .assembly.agent import check_agent_specs

            check_agent_specs(config)
        else:  # a config may be someone else's: reading it never imports or runs its code
            from .agents.static_specs import check_specs_statically

            check_specs_statically(config)
        for note in config_notes(config):
            print(f"# note: {note}")
        if path is None:
            print(_SHOWN_DEMO if demo else _SHOWN_DEFAULTS)
        print(render_config(config, preset_keys), end="")
        return 0
    _preflight(args, path, overrides)  # input errors are answered before torch is imported (seconds)
    _quiet_libraries()
    if args.command == "train":
        from .recipe import train

        train(path, overrides, output_dir=args.output_dir, resume=args.resume, overwrite=args.overwrite,
              trust_run_code=args.trust_run_code)
        return 0
    if args.command == "eval":
        from .recipe import evaluate_run

        if args.step is not None and args.output_dir is None:
            raise ConfigError(f"--step {args.step}: give the run with --output-dir RUN_DIR (a step is a checkpoint "
                              "of a run)")
        evaluate_run(path, overrides, output_dir=args.output_dir, model=args.model,
                     trust_run_code=args.trust_run_code, step=args.step, completions_path=args.completions)
        return 0
    raise AssertionError(args.command)


def _preflight(args: argparse.Namespace, path: str | None, overrides: list[str]) -> None:
    """``train`` / ``eval``: the config, and every check of the input that needs no model
    (:mod:`steadyrl.preflight.inputs`), before the trainer, torch and transformers are imported."""
    from .config import load_config
    from .preflight import inputs as preflight

    if args.command == "train" and (args.resume or args.overwrite) and not args.output_dir:
        flag = "--resume" if args.resume else "--overwrite"
        raise ConfigError(f"{flag} needs --output-dir RUN_DIR: the run to {'continue' if args.resume else 'replace'}")
    if args.command == "eval" and args.completions is not None:  # written after the whole evaluation: checked now
        from .run.directory import check_completions_path

        check_completions_path(args.completions, path)
    source = _config_source(args, path)
    if source and source != path:  # train --resume / eval --output-dir without a config: the run's own
        from .run.directory import check_saved_config

        check_saved_config(Path(args.output_dir))  # the run's own config.yaml: whole, before it is read
    model = [f"model.name_or_path={args.model}"] if getattr(args, "model", None) else []
    config = load_config(source, [*overrides, *model])
    if args.command == "eval" and args.completions is not None:
        _check_completions_not_data(args.completions, config)
    if _reads_run_config(args, path, source):  # a run directory's own config: its code only when trusted
        _check_run_code(args, config, Path(source))
    if args.command == "train":
        preflight.check_train(config, output_dir=args.output_dir, resume=args.resume, overwrite=args.overwrite)
    elif args.output_dir is None and config.model.name_or_path is not None:  # eval of a model
        preflight.check_eval(config, config.model.name_or_path, of_run_dir=False)
    elif args.output_dir is not None and path is not None:  # a run's checkpoint, the user's config
        preflight.check_eval(config, None, of_run_dir=True)


def _check_completions_not_data(completions: str, config) -> None:
    """``eval --completions FILE`` is not one of the config's prompt files (JSONL both: it would replace them)."""
    data = config.data
    named = [("data.train_path", data.train_path), ("data.eval_path", data.eval_path)]
    named += [(f"data.{kind}[{i}].path", s.path) for kind in ("train_sources", "eval_sources")
              for i, s in enumerate(getattr(data, kind) or ())]
    target = Path(completions).resolve()
    for key, value in named:
        if value and Path(value).exists() and Path(value).resolve() == target:
            raise ConfigError(f"--completions {completions!r} is {key}: the completions would replace those prompts "
                              "(give another file)")


def _reads_run_config(args: argparse.Namespace, path: str | None, source: str | None) -> bool:
    """Whether ``train`` / ``eval`` reads a run directory's own config.yaml: eval's without a config,
    or train --resume's, named or not (as :func:`steadyrl.run.start.load_run_config` tells them)."""
    if source is None or not args.output_dir:
        return False
    if args.command == "eval":
        return source != path
    return args.resume and Path(source).resolve() == (Path(args.output_dir) / "config.yaml").resolve()


def _check_run_code(args: argparse.Namespace, config, saved: Path) -> None:
    """``train --resume`` / ``eval --output-dir`` of a run's own config.yaml: the one rule
    (:func:`steadyrl.run.trust.check_config_code`), before anything it names is imported."""
    from .run.trust import check_config_code, check_run_code

    if args.command == "eval":
        check_run_code(config, saved.parent, args.trust_run_code)
    else:
        check_config_code(config, saved, args.trust_run_code, who=f"--resume --output-dir {args.output_dir!r}",
                          instead="or resume with a config of your own (steadyrl train CONFIG.yaml --resume "
                                  "--output-dir RUN)")


_CONFIG_SUFFIXES = (".yaml", ".yml")


def _doctor(args: argparse.Namespace) -> int:
    """``steadyrl doctor TARGET``: a config file (.yaml) is the pre-flight (:mod:`steadyrl.preflight.gap`);
    anything else is read as a run directory (:mod:`steadyrl.doctor`; bad input, exit 2, when it is
    not one)."""
    target = Path(args.target)
    if target.suffix in _CONFIG_SUFFIXES and target.is_file():
        if args.set:
            raise ConfigError(f"--set {args.set[0]!r}: detector thresholds apply to a RUN_DIR, not to the "
                              f"pre-flight of {target}; use --tolerance")
        from .preflight.report import preflight_cli

        return preflight_cli(str(target), args.overrides, output=args.output, batches=args.batches,
                             prompts=args.prompts, tolerance=args.tolerance, trust_run_code=args.trust_run_code)
    if args.overrides:
        raise ConfigError(f"{args.overrides[0]!r}: key=value overrides go with a CONFIG.yaml (the pre-flight); "
                          f"RUN_DIR {target} is only read")
    from .doctor import REPORT_FILE, Thresholds, doctor_cli

    Thresholds().with_overrides(args.set or [])  # a bad --set: exit 2 before anything else is read
    if args.output is not None:  # a directory, a missing folder: exit 2, not a traceback; a run's record: not replaced
        from .run.directory import check_output_file

        check_output_file(args.output, "--output", allow=(REPORT_FILE,))  # the run's triage, rewritten on purpose
    return doctor_cli(str(target), args.output, args.set)


def _convert(args: argparse.Namespace) -> int:
    from .convert import convert_gguf

    _quiet_libraries()
    out = convert_gguf(args.gguf, args.out_dir, dtype=args.dtype, overwrite=args.overwrite)
    print(f"wrote {out}: use it as model.name_or_path={out}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from .config import load_config
    from .files import refuse_link

    run_dir = Path(args.run_dir)
    saved = run_dir / "config.yaml"
    refuse_link(saved)
    if not saved.is_file():
        raise ConfigError(f"RUN_DIR {args.run_dir!r} has no config.yaml: not a steadyrl run directory")
    if args.out is not None and (Path(args.out).exists() or Path(args.out).is_symlink()) and not args.overwrite:
        raise ConfigError(f"OUT {args.out!r} already exists: pass --overwrite to replace it, or choose another OUT")
    if args.out is None and args.push_to_hub is None:
        raise ConfigError("steadyrl export needs OUT (the directory to write), --push-to-hub REPO, or both")
    token = None
    if args.push_to_hub is not None:  # before anything is exported: a merge may take minutes
        from .run.hub import check_push

        token = check_push(args.push_to_hub, args.token)
    config = load_config(str(saved), [])
    model = config.model
    if args.merge_lora:  # merging loads the base model: with the model's own files where the config says so
        from .run.trust import check_config_code

        check_config_code(config, saved, args.trust_run_code, who=f"export --merge-lora {args.run_dir!r}",
                          instead="or export the adapter alone (without --merge-lora)", model_only=True)
    final = run_dir / "final"
    if args.out is None and args.step is None and (final.is_dir() or final.is_symlink()):  # the model train wrote
        return _push(final, args, token, f"steadyrl: the final model of {run_dir.name}")
    _quiet_libraries()
    import tempfile

    from .run.export import export_checkpoint, find_checkpoint

    checkpoint = find_checkpoint(run_dir, args.step)
    with tempfile.TemporaryDirectory(prefix="steadyrl-export-") as scratch:
        target = Path(args.out) if args.out is not None else Path(scratch) / run_dir.name
        out = export_checkpoint(checkpoint, target, merge_lora=args.merge_lora, base=model.name_or_path,
                                revision=model.revision, trust_remote_code=model.trust_remote_code,
                                overwrite=args.overwrite)
        if args.out is not None:
            print(f"exported {checkpoint} to {out}")
        if args.push_to_hub is not None:
            return _push(out, args, token, f"steadyrl: {run_dir.name} {checkpoint.name}")
    return 0


def _push(folder: Path, args: argparse.Namespace, token: str, message: str) -> int:
    from .run.hub import push_folder

    url = push_folder(folder, args.push_to_hub, token, private=not args.public, message=message)
    print(f"pushed {folder} to {url}")
    return 0


_SHOWN_DEFAULTS = ("# steadyrl's defaults (no config file given). `steadyrl train` with no config runs the "
                   "built-in demo, whose values differ: steadyrl config show demo.task=reverse "
                   "(or demo.task=tool, demo.task=vision)")
_SHOWN_DEMO = "# the built-in demo's config: what `steadyrl train` with no config file runs (demo.task chooses it)"


def _config_source(args: argparse.Namespace, path: str | None) -> str | None:
    """The config file ``train`` / ``eval`` read: without one, a run's own ``config.yaml`` when
    resuming it or evaluating it (as the trainer does), else ``path`` (None: the demo)."""
    run_dir = getattr(args, "output_dir", None)
    if path is None and run_dir and (args.command == "eval" or getattr(args, "resume", False)):
        saved = Path(run_dir) / "config.yaml"
        from .files import refuse_link

        refuse_link(saved)  # steadyrl never reads through a link in a run directory
        return str(saved) if saved.is_file() else None
    return path


def _one_line(exc: BaseException) -> str:
    """The message on one line: an input error is one line on stderr, even when it quotes a
    multi-line message (a user's reward module raising on import, a library's error)."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return redact_text(text)  # a library's message may quote a key it was given (steadyrl.secrets)


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


def no_bars_without_a_tty() -> None:
    """Libraries' tqdm bars (transformers' GGUF de-quantising, weight loading) written to a log are
    thousands of carriage-returned lines: without a terminal on stderr they are turned off
    (``TQDM_DISABLE``, read when tqdm is imported: so before anything imports it; a value already
    set wins). steadyrl's own progress prints plain lines there (:mod:`steadyrl.progress`)."""
    isatty = getattr(sys.stderr, "isatty", None)
    if not (isatty and isatty()):
        os.environ.setdefault("TQDM_DISABLE", "1")


def main(argv: list[str] | None = None) -> int:
    from .secrets import redacting_excepthook

    sys.excepthook = redacting_excepthook  # a crash's traceback: secrets redacted by value (issue 30, item 12)
    no_bars_without_a_tty()
    args = _parse(argv)
    try:
        return _run(args)
    except ConfigError as exc:
        for problem in getattr(exc, "problems", None) or [exc]:  # a config's every problem, a line each
            print(f"steadyrl: error: {_one_line(problem)}", file=sys.stderr)
        return 2
    except TrainingHalted as exc:
        print(f"steadyrl: training stopped: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        hint = getattr(exc, "hint", None)  # a run that has a directory says how to continue it
        print("steadyrl: interrupted" + (f"; {hint}" if hint else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
