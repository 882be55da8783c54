"""Optional tracking backends: TensorBoard, Weights & Biases, MLflow, Trackio.

Each backend is a small class with ``log(metrics, step)``, ``log_samples(rows, step)`` and
``close()``, registered under its name in :data:`BACKENDS`. Its package is imported only when the
backend is asked for; a missing package is a :class:`~steadyrl.errors.ConfigError` that names the
backend and the install command. ``metrics.jsonl`` is not a backend: it is always written (see
:mod:`steadyrl.tracking.jsonl`).

Backends get the metrics as logged (NaN / inf included: each of them shows those), and the
config as plain JSON data. A backend that supports resuming (wandb, mlflow, trackio) is handed
the id it returned on the first start (kept in ``run_dir/tracking.json``), so a resumed run
continues the same remote run instead of opening a new one.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError

__all__ = ["BACKENDS", "BackendName", "INSTALL_HINT", "check_backends_available", "make_backend", "samples_markdown"]

BackendName = Literal["tensorboard", "wandb", "mlflow", "trackio"]
INSTALL_HINT = "pip install 'steadyrl[tracking]'"
SAMPLE_CELL_CHARS = 2000
"""Longest prompt / completion cell in the TensorBoard sample table (``samples.jsonl`` is whole)."""


def _require(backend: str, module: str, package: str | None = None) -> Any:
    """Import ``module`` for ``backend``, or raise a ConfigError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        package = package or module.split(".")[0]
        raise ConfigError(
            f"trainer.trackers asks for {backend!r} but its package "
            f"{package!r} is not installed ({e}). Install it with: {INSTALL_HINT}  "
            f"(or: pip install {package}); or drop {backend!r} from the backends. "
            f"metrics.jsonl is written either way."
        ) from None


def _columns(rows: list[Mapping[str, Any]]) -> list[str]:
    """Column order of a sample table: step, prompt, completion, reward first, then the rest."""
    first = [c for c in ("step", "prompt", "completion", "reward") if any(c in r for r in rows)]
    rest = sorted({k for r in rows for k in r} - set(first))
    return first + rest


def _cell(value: Any, limit: int = SAMPLE_CELL_CHARS) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else ("" if value is None else str(value))
    if len(text) > limit:
        text = text[:limit] + " …"
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", "<br>")


def samples_markdown(rows: list[Mapping[str, Any]]) -> str:
    """A markdown table of the sample rows (pipes escaped, newlines as ``<br>``)."""
    cols = _columns(rows)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


class TensorBoardBackend:
    """``torch.utils.tensorboard.SummaryWriter`` under ``run_dir/tensorboard``."""

    def __init__(self, run_dir: Path, config: dict, run_name: str | None, project: str | None, resume_id: str | None):
        _require("tensorboard", "tensorboard")
        writer_cls = _require("tensorboard", "torch.utils.tensorboard", "tensorboard").SummaryWriter
        self.writer = writer_cls(log_dir=str(run_dir / "tensorboard"), flush_secs=30)
        self.writer.add_text("config", "```json\n" + json.dumps(config, indent=2) + "\n```", 0)
        self.run_id = None

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)

    def log_samples(self, rows: list[dict], step: int) -> None:
        self.writer.add_text("samples", samples_markdown(rows), step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


class WandbBackend:
    """``wandb.init(project, name, config, dir=run_dir, id, resume="allow")``; samples as a ``wandb.Table``."""

    def __init__(self, run_dir: Path, config: dict, run_name: str | None, project: str | None, resume_id: str | None):
        self.wandb = _require("wandb", "wandb")
        self.run = self.wandb.init(
            project=project or "steadyrl", name=run_name, config=config, dir=str(run_dir),
            id=resume_id, resume="allow" if resume_id else None,
        )  # fmt: skip
        self.run_id = getattr(self.run, "id", None)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_samples(self, rows: list[dict], step: int) -> None:
        cols = _columns(rows)
        table = self.wandb.Table(columns=cols, data=[[r.get(c) for c in cols] for r in rows])
        self.run.log({"samples": table}, step=step)

    def close(self) -> None:
        self.run.finish()


_MLFLOW_BAD_CHARS = re.compile(r"[^\w/.\- ]")


def mlflow_key(name: str) -> str:
    """MLflow accepts only ``[\\w/.\\- ]`` in names: ``eval/pass@k`` becomes ``eval/pass_k``."""
    return _MLFLOW_BAD_CHARS.sub("_", name)


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


class MlflowBackend:
    """``mlflow.start_run`` in the experiment named by ``project``; config as flattened params."""

    PARAM_CHARS = 500  # the smallest limit on a param value across MLflow versions
    PARAMS_PER_CALL = 100  # MLflow's batch limit

    def __init__(self, run_dir: Path, config: dict, run_name: str | None, project: str | None, resume_id: str | None):
        self.mlflow = _require("mlflow", "mlflow")
        if project:
            self.mlflow.set_experiment(project)
        self.run = self.mlflow.start_run(run_id=resume_id, run_name=None if resume_id else run_name)
        self.run_id = self.run.info.run_id
        if not resume_id:
            params = {mlflow_key(k): str(v)[: self.PARAM_CHARS] for k, v in _flatten(config).items()}
            items = list(params.items())
            for i in range(0, len(items), self.PARAMS_PER_CALL):
                self.mlflow.log_params(dict(items[i : i + self.PARAMS_PER_CALL]))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.mlflow.log_metrics({mlflow_key(k): float(v) for k, v in metrics.items()}, step=step)

    def log_samples(self, rows: list[dict], step: int) -> None:
        cols = _columns(rows)
        self.mlflow.log_table({c: [r.get(c) for r in rows] for c in cols}, artifact_file=f"samples/step_{step:07d}.json")

    def close(self) -> None:
        self.mlflow.end_run()


class TrackioBackend:
    """``trackio.init(project, name, config, resume)``; its API mirrors wandb's."""

    def __init__(self, run_dir: Path, config: dict, run_name: str | None, project: str | None, resume_id: str | None):
        self.trackio = _require("trackio", "trackio")
        name = resume_id or run_name or run_dir.name
        self.run = self.trackio.init(
            project=project or "steadyrl", name=name, config=config, resume="allow" if resume_id else "never"
        )
        self.run_id = name

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.trackio.log(dict(metrics), step=step)

    def log_samples(self, rows: list[dict], step: int) -> None:
        cols = _columns(rows)
        table = self.trackio.Table(columns=cols, data=[[r.get(c) for c in cols] for r in rows])
        self.trackio.log({"samples": table}, step=step)

    def close(self) -> None:
        self.trackio.finish()


BACKENDS: dict[str, Callable[..., Any]] = {
    "tensorboard": TensorBoardBackend,
    "wandb": WandbBackend,
    "mlflow": MlflowBackend,
    "trackio": TrackioBackend,
}


def check_backend_names(names: list[str]) -> list[str]:
    """The names, deduplicated in order; an unknown one is a ConfigError listing the valid ones."""
    out: list[str] = []
    for name in names:
        if name not in BACKENDS:
            raise ConfigError(
                f"trainer.trackers: unknown backend {name!r}; valid: {', '.join(BACKENDS)} "
                f"(metrics.jsonl is always written and needs no backend)"
            )
        if name not in out:
            out.append(name)
    return out


PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}


def check_backends_available(names: list[str]) -> None:
    """Import each asked-for backend's package now (before any model is loaded): a missing one is
    a ConfigError naming ``trainer.trackers`` and how to install it."""
    for name in check_backend_names(list(names)):
        _require(name, PACKAGES[name])


def make_backend(name: str, run_dir: Path, config: dict, run_name: str | None, project: str | None,
                 resume_id: str | None = None) -> Any:  # fmt: skip
    """Start backend ``name`` (its package imported now, not before)."""
    return BACKENDS[check_backend_names([name])[0]](run_dir, config, run_name, project, resume_id)
