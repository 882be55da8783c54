"""The :class:`Tracker` the trainer logs through, and :func:`read_metrics` to read a run back.

What goes where (``run_dir`` is the run's output directory):

* ``metrics.jsonl``: always; one line per step, ``{"step": 7, "reward/mean": 0.41, ...}``, flushed
  per line, non-finite values as ``null`` (see :mod:`steadyrl.tracking.jsonl`);
* ``samples.jsonl``: always, when samples are logged; one line per sample completion;
* ``tracking.json``: run name, project, backends and the remote run ids (for resuming);
* each backend asked for: ``tensorboard/`` under ``run_dir``, or the wandb / mlflow / trackio run.

Only the main process writes: with ``is_main_process=False`` every call is a no-op.
A backend that fails while logging (network, quota) is warned about once and does not stop
training; ``metrics.jsonl`` is the record that is always complete.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..files import atomic_write_text
from ..secrets import redact_secrets
from .backends import check_backend_names, make_backend
from .jsonl import JsonlWriter, jsonable, read_jsonl, truncate_jsonl

__all__ = ["METRICS_FILE", "SAMPLES_FILE", "STATE_FILE", "Tracker", "read_metrics", "read_samples"]

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
STATE_FILE = "tracking.json"


def _as_float(value: Any) -> float | None:
    """A number as float (tensors and numpy scalars too), or None for anything else."""
    if isinstance(value, bool) or isinstance(value, str):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


class Tracker:
    """Writes a run's metrics and samples to ``run_dir`` and to the backends asked for.

    Args:
        run_dir: the run's output directory (created if missing).
        backends: any of ``"tensorboard"``, ``"wandb"``, ``"mlflow"``, ``"trackio"``; each is
            imported only when asked for. ``metrics.jsonl`` is written whatever this is.
        config: the run's configuration (sent to the backends as plain JSON data).
        run_name: name of the run in the backends (default: the backend's own).
        project: wandb / trackio project, MLflow experiment (default ``"steadyrl"``).
        is_main_process: only the main process writes; elsewhere every call is a no-op.
        resume_step: resuming from a checkpoint taken at this step: lines of ``metrics.jsonl`` and
            ``samples.jsonl`` with a later step are dropped first, and the backends continue the
            remote runs recorded in ``tracking.json``.

    Logging a step lower than the last one logged also drops the later lines (with a warning),
    and logging the same step twice merges into one line: ``metrics.jsonl`` never holds a
    step twice.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        backends: Iterable[str] = (),
        *,
        config: Mapping[str, Any] | None = None,
        run_name: str | None = None,
        project: str | None = None,
        is_main_process: bool = True,
        resume_step: int | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.backend_names = check_backend_names(list(backends))
        self.is_main_process = is_main_process
        self.backends: dict[str, Any] = {}
        self._failed: set[str] = set()
        self._metrics: JsonlWriter | None = None
        self._samples: JsonlWriter | None = None
        self._closed = False
        if not is_main_process:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            truncate_jsonl(self.run_dir / SAMPLES_FILE, max_step=resume_step)
        self._metrics = JsonlWriter(self.run_dir / METRICS_FILE, merge_same_step=True)
        if resume_step is not None:
            self._metrics.truncate_after(resume_step)
        # secrets by name and by value (steadyrl.secrets), whoever built the config dict
        self._start_backends(jsonable(redact_secrets(dict(config or {}))), run_name, project,
                             resume=resume_step is not None)

    def _start_backends(self, config: dict, run_name: str | None, project: str | None, resume: bool) -> None:
        state_path = self.run_dir / STATE_FILE
        old_ids = {}
        if resume and state_path.exists():
            old_ids = json.loads(state_path.read_text()).get("run_ids", {})
        try:
            for name in self.backend_names:
                self.backends[name] = make_backend(name, self.run_dir, config, run_name, project, old_ids.get(name))
        except BaseException:
            self.close()
            raise
        state = {
            "run_name": run_name,
            "project": project,
            "backends": self.backend_names,
            "run_ids": {n: b.run_id for n, b in self.backends.items() if b.run_id is not None},
        }
        atomic_write_text(state_path, json.dumps(state, indent=2) + "\n")

    # --- logging ---------------------------------------------------------------------------------
    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log one step's metrics (numbers; tensors and numpy scalars are converted)."""
        if self._metrics is None or self._closed:
            return
        step = int(step)
        record = {k: v for k, v in metrics.items() if k != "step"}
        self._metrics.write(record, step)
        numbers = {k: f for k, v in record.items() if (f := _as_float(v)) is not None}
        if numbers:
            self._each_backend("log", numbers, step)

    def log_samples(self, rows: Iterable[Mapping[str, Any]], step: int) -> None:
        """Log a table of sample completions: one dict per sample, e.g. ``prompt``, ``completion``,
        ``reward`` and one score per reward function (``reward/<name>``)."""
        if self._metrics is None or self._closed:
            return
        step = int(step)
        rows = [{k: jsonable(v) for k, v in row.items() if k != "step"} for row in rows]
        if not rows:
            return
        if self._samples is None:
            self._samples = JsonlWriter(self.run_dir / SAMPLES_FILE, merge_same_step=False)
        for row in rows:
            self._samples.write(row, step)
        self._each_backend("log_samples", rows, step)

    def _each_backend(self, method: str, payload: Any, step: int) -> None:
        for name, backend in self.backends.items():
            try:
                getattr(backend, method)(payload, step)
            except Exception as e:  # a tracker must not stop training; metrics.jsonl has it all
                if name not in self._failed:
                    self._failed.add(name)
                    warnings.warn(
                        f"tracking backend {name!r} failed in {method} at step {step}: {e!r}; "
                        f"training goes on and metrics.jsonl keeps the full record",
                        RuntimeWarning,
                        stacklevel=3,
                    )

    def truncate_after(self, step: int) -> None:
        """Drop every metrics and samples line with a step greater than ``step``."""
        if self._metrics is None or self._closed:
            return
        self._metrics.truncate_after(step)
        if self._samples is not None:
            self._samples.truncate_after(step)
        else:
            truncate_jsonl(self.run_dir / SAMPLES_FILE, max_step=step)

    @property
    def last_step(self) -> int | None:
        """The last step in ``metrics.jsonl`` (None if none, or not the main process)."""
        return None if self._metrics is None else self._metrics._last_step

    def close(self) -> None:
        """Flush and close the files and finish every backend; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        for name, backend in self.backends.items():
            try:
                backend.close()
            except Exception as e:
                warnings.warn(f"tracking backend {name!r} failed to close: {e!r}", RuntimeWarning, stacklevel=2)
        for writer in (self._metrics, self._samples):
            if writer is not None:
                writer.close()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _jsonl_path(run_dir: str | os.PathLike, name: str) -> Path:
    path = Path(run_dir)
    return path if path.suffix == ".jsonl" else path / name


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """The metrics of a run (its directory, or a ``metrics.jsonl`` path), one dict per step.

    Sorted by step; a step that appears on several lines is merged (later lines win); ``null``
    (a non-finite value) is dropped, so a missing key means "not logged". A partial last line
    (a crash mid-write) is skipped. A missing file reads as ``[]``.
    """
    by_step: dict[float, dict] = {}
    for row in read_jsonl(_jsonl_path(run_dir, METRICS_FILE)):
        merged = by_step.setdefault(row["step"], {})
        merged.update({k: v for k, v in row.items() if v is not None})
    return [by_step[s] for s in sorted(by_step)]


def read_samples(run_dir: str | os.PathLike) -> list[dict]:
    """The sample rows of a run (its directory, or a ``samples.jsonl`` path), in file order."""
    return read_jsonl(_jsonl_path(run_dir, SAMPLES_FILE))

