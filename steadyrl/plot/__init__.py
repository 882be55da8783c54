"""``steadyrl plot``: a PNG dashboard of a run (or several, overlaid) from its ``metrics.jsonl``.

One panel per question a person asks of an RL run: is the reward going up (mean, ± std band; each
reward function's mean in a panel of its own, on its own scale, when there are several), does it
generalise (eval accuracy and pass@k on one 0–100 % axis, eval reward on its own), does the policy
use its tools (multi-turn: tool calls per episode, and tool errors on their own axis), how far
has the policy moved (KL and its coefficient; the raw KL of a KL loss), is it still exploring
(entropy), how often does PPO clip, are responses growing or hitting the length limit, is the
optimiser healthy (grad norm, learning rate), where does the time go
(generate / score / update), is the batch carrying signal (zero-std groups, kept and valid
samples, clipped advantages), the losses (policy loss and coef × KL), the critic (PPO) and the
throughput. Panels whose metrics were not logged are left out and named in the header, as are
the PPO clip fractions when they are all 0 (one optimizer step per batch); skipped steps
(``health/skipped_steps`` going up) are dotted vertical lines on every panel. The header gives the
run name, the step range, the reward at the start and the end, the wall time, and the counts of
skipped steps, warnings and failed reward calls.

Series are smoothed with a light exponential moving average (span ~ points / 30) drawn over the
faint raw values; short series (<= 30 points) are drawn raw with markers, so one step still plots;
four evaluations or fewer (before and after training) are bare points with their values written
beside them. Runs overlaid get a colour each, named in every panel's legend; a run's series differ
in line style and marker (``series.py``).

    plot_run("runs/grpo")                             # -> runs/grpo/dashboard.png (+ report.md)
    plot_runs(["runs/a", "runs/b"], "a_vs_b.png")     # overlaid, one colour per run

The command line: ``steadyrl plot RUN_DIR [RUN_DIR ...] [--out FILE]`` calls :func:`plot_cli`
(or :func:`add_arguments` + :func:`run`); :func:`main` runs it on its own, as does
``python -m steadyrl.plot``.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError, DataError
from ..files import atomic_write_bytes, refuse_link
from .data import Run, ema, load_run
from .draw import figure
from .panels import PANELS, Line, Panel

__all__ = ["DASHBOARD_FILE", "PANELS", "Line", "Panel", "Run", "add_arguments", "ema", "load_run", "main", "plot_cli",
           "plot_run", "plot_runs", "run"]  # fmt: skip

DASHBOARD_FILE = "dashboard.png"

_RC = {
    "font.size": 9, "axes.titlesize": 10.5, "axes.titleweight": "bold", "axes.labelsize": 9,
    "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6, "axes.spines.top": False,
    "axes.spines.right": False, "legend.fontsize": 7.5, "legend.framealpha": 0.85, "xtick.labelsize": 8,
    "ytick.labelsize": 8, "axes.titley": 1.0, "axes.titlepad": 5,  # a fixed title place: no costly auto-placement
}  # fmt: skip


def plot_runs(run_dirs: Sequence[str | Path], out_path: str | Path) -> Path:
    """Overlay several runs (one colour each, a legend of run names) in one dashboard PNG."""
    import matplotlib

    if not run_dirs:
        raise DataError("plot: give at least one run directory")
    runs = [load_run(d) for d in run_dirs]
    out_path = Path(out_path)
    refuse_link(out_path, "overwrite")  # before the drawing: steadyrl never writes through a link
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(_RC):
        fig = figure(runs)
        png = io.BytesIO()
        fig.savefig(png, format="png")
    atomic_write_bytes(out_path, png.getvalue())
    return out_path


def plot_run(run_dir: str | Path, out_path: str | Path | None = None) -> Path:
    """Write the dashboard of one run (default ``run_dir/dashboard.png``) and the doctor's ``report.md``
    beside it (nothing when no training step was logged yet); returns the dashboard's path.
    ``run_dir`` may also be the run's ``metrics.jsonl`` (the dashboard then goes beside it)."""
    folder = Path(run_dir).parent if Path(run_dir).is_file() else Path(run_dir)
    path = plot_runs([run_dir], folder / DASHBOARD_FILE if out_path is None else out_path)
    from ..doctor import REPORT_FILE, write_report  # the run's triage beside its dashboard

    write_report(folder, path.parent / REPORT_FILE)
    return path


# --- command line --------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``steadyrl plot`` arguments: ``RUN_DIR [RUN_DIR ...] [--out FILE]``."""
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run output directory (several: overlaid)")
    parser.add_argument("--out", "-o", help="PNG to write (default: RUN_DIR/dashboard.png; with several runs: "
                        "comparison.png in the current directory)")  # fmt: skip
    return parser


def plot_cli(run_dirs: Sequence[str | Path], out: str | Path | None = None) -> int:
    """``steadyrl plot RUN_DIR [RUN_DIR ...] [--out FILE]``: writes the PNG and prints its path.
    Input errors raise :class:`~steadyrl.errors.ConfigError` (the ``steadyrl`` CLI exits 2)."""
    if len(run_dirs) == 1:
        path = plot_run(run_dirs[0], out)
    else:
        path = plot_runs(run_dirs, out or "comparison.png")
    print(path)
    return 0


def run(args: argparse.Namespace) -> int:
    """Carry out parsed :func:`add_arguments` arguments."""
    return plot_cli(args.run_dirs, args.out)


def main(argv: Sequence[str] | None = None) -> int:
    """``steadyrl plot`` on its own: exit status 0, or 2 with the message for an input error."""
    description = "Plot a run's metrics.jsonl as a PNG dashboard (several runs: overlaid)."
    args = add_arguments(argparse.ArgumentParser(prog="steadyrl plot", description=description)).parse_args(argv)
    try:
        return run(args)
    except ConfigError as e:
        print(f"steadyrl plot: error: {e}", file=sys.stderr)
        return 2

