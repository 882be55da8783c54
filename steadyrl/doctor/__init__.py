"""``steadyrl doctor RUN_DIR``: triage of a run from its metrics.jsonl and samples.jsonl (and
``steadyrl doctor CONFIG.yaml`` is the pre-flight of :mod:`steadyrl.preflight`, which imports torch).

Each detector (a function in :data:`DETECTORS`, see :mod:`.policy` and :mod:`.learning`) looks
for one way runs go wrong: entropy collapse or explosion, clip fraction drift, groups without
reward variance, rising truncation, length hacking, reward rising while held-out accuracy falls,
a growing training-inference mismatch, gradient spikes and skipped steps, one reward component or
domain dominating, stale batches, updates lost to precision (a frozen policy), failed episodes, a
judge that returns no verdict (:mod:`.judges`). Their thresholds are :class:`Thresholds` (``--set name=value``).
A run shorter than ``min_steps`` is "too short to judge", never "healthy".

The report (markdown) names each problem's steps, evidence and the change most likely to help,
with example samples; a healthy (or too short) run gets one line. It goes to stdout, or to ``--output FILE``:
the doctor never writes into a run directory on its own. Exit status: 0 healthy, 1 a problem
found, 2 bad input (not a run directory, an unknown threshold). No torch is imported.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import learning, policy, precision  # noqa: F401  (fill DETECTORS)
from . import episodes, judges  # noqa: F401,I001  (after them: the registry's order is the report's)
from ..files import atomic_write_text
from .findings import DETECTORS, Finding, register_detector
from .report import render, verdict
from .run import RunData, load_run
from ..config.doctor_thresholds import Thresholds

__all__ = ["DETECTORS", "REPORT_FILE", "Finding", "RunData", "Thresholds", "diagnose", "doctor_cli", "load_run",
           "register_detector", "write_report"]

REPORT_FILE = "report.md"
"""The report ``steadyrl train`` (at its end) and ``steadyrl plot`` (beside dashboard.png) write."""


def diagnose(run: RunData, thresholds: Thresholds | None = None) -> list[Finding]:
    """Every detector's finding on ``run``, most severe first (ties: registration order)."""
    t = thresholds or Thresholds()
    found = [f for fn in DETECTORS.values() if (f := fn(run, t)) is not None]
    return sorted(found, key=lambda f: -f.severity)


def _changed(thresholds: Thresholds) -> dict[str, float]:
    default = Thresholds()
    return {f.name: getattr(thresholds, f.name) for f in dataclasses.fields(Thresholds)
            if getattr(thresholds, f.name) != getattr(default, f.name)}


def run_thresholds(run: RunData) -> Thresholds:
    """The thresholds the run itself set (``trainer.doctor_thresholds`` of its config.yaml), else the defaults."""
    trainer = run.config.get("trainer") if isinstance(run.config, dict) else None
    settings = trainer.get("doctor_thresholds") if isinstance(trainer, dict) else None  # hand-edited: anything
    if not isinstance(settings, dict) or not settings:
        return Thresholds()
    try:
        return Thresholds().with_overrides([f"{k}={v}" for k, v in settings.items()])
    except ValueError:  # a hand-edited config.yaml: the report still comes, with the defaults
        return Thresholds()


def write_report(run_dir: str | Path, out_path: str | Path | None = None) -> tuple[Path, list[Finding], str] | None:
    """Write the triage of ``run_dir`` to ``out_path`` (default ``run_dir/report.md``) with the run's
    own thresholds: ``(path, findings, verdict)`` (the verdict's one line: healthy, too short to judge,
    or the first problem); ``None`` (nothing written) when the directory holds no training step yet."""
    from ..errors import DataError

    try:
        run = load_run(run_dir)
    except DataError:
        return None
    thresholds = run_thresholds(run)
    findings = diagnose(run, thresholds)
    path = Path(out_path) if out_path is not None else Path(run_dir) / REPORT_FILE
    text = render(run, findings, len(DETECTORS), _changed(thresholds), thresholds.min_steps)
    atomic_write_text(path, text)  # a link: refused
    return path, findings, verdict(run, findings, thresholds.min_steps)


def doctor_cli(run_dir: str, output: str | None = None, settings: list[str] | None = None) -> int:
    """Read ``run_dir``, write the report to ``output`` (stdout when None); 0 healthy, 1 problems.
    The thresholds are the run's own (``trainer.doctor_thresholds``, as report.md's) with ``settings``
    (``--set``) over them: the live lines send the user here, and this report must not contradict report.md.
    Bad input raises :class:`~steadyrl.errors.ConfigError` (the CLI exits 2); the command line checks
    ``output`` before (:func:`steadyrl.run.directory.check_output_file`: no directory, link or run record)."""
    Thresholds().with_overrides(settings or [])  # a bad --set: exit 2 before the run is read
    run = load_run(run_dir)
    thresholds = run_thresholds(run).with_overrides(settings or [])
    findings = diagnose(run, thresholds)
    text = render(run, findings, len(DETECTORS), _changed(thresholds), thresholds.min_steps)
    if output is None:
        print(text, end="")
    else:
        atomic_write_text(output, text)
        print(f"{output}: {verdict(run, findings, thresholds.min_steps)}")
    return 1 if findings else 0
