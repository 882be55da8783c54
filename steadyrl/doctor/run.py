"""A finished (or running) run directory as the detectors read it: metric series, samples, and
the small statistics every detector shares (early / late windows, trends, correlation).

Pure Python: the doctor answers before torch could even be imported, and it only reads. A
directory that is not a steadyrl run is a :class:`~steadyrl.errors.DataError` (exit 2) naming what
was expected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ..config.renamed import renamed_copy
from ..errors import ConfigError, DataError
from ..files import read_text_nofollow
from ..printable import printable
from ..tracking.tracker import METRICS_FILE, SAMPLES_FILE, read_metrics, read_samples

MARKER = ".steadyrl-run"
"""The file ``steadyrl train`` writes first in its run directory (run/directory.py)."""

Series = list[tuple[float, float]]
"""``[(step, value), ...]`` in step order, finite values only."""


@dataclass
class RunData:
    """A run's training metrics (steps >= 1; step 0 is the evaluation before training), its
    held-out evaluations, and its logged samples."""

    path: Path
    rows: list[dict]
    samples: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)

    @property
    def steps(self) -> list[float]:
        return [r["step"] for r in self.rows if r["step"] >= 1 and _has_training_keys(r)]

    def series(self, key: str, *, train_only: bool = True) -> Series:
        """The finite values of ``key`` by step (training steps only unless ``train_only`` is False)."""
        out = []
        for row in self.rows:
            value = row.get(key)
            if (not train_only or row["step"] >= 1) and _finite(value):
                out.append((float(row["step"]), float(value)))
        return out

    def setting(self, key: str) -> str:
        """`` (now X)`` for a dotted key of the run's config.yaml, or ``""`` when it cannot be read."""
        node = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return ""
            node = node[part]
        return f" (now {printable(node, keep='')})" if not isinstance(node, (dict, list)) else ""

    @property
    def distillation(self) -> str | None:
        """``"pure"`` (a teacher, ``teacher.task_rewards: false``: only the teacher's signal enters the
        advantage), ``"mixed"`` (a teacher and the task's rewards) or None (no teacher), from config.yaml."""
        teacher = self.config.get("teacher") if isinstance(self.config, dict) else None
        if not isinstance(teacher, dict) or not teacher.get("name_or_path"):
            return None
        return "pure" if teacher.get("task_rewards") is False else "mixed"

    def keys(self, prefix: str = "", suffix: str = "") -> list[str]:
        """Every logged key with that prefix and suffix, sorted."""
        found = {k for row in self.rows for k in row if k.startswith(prefix) and k.endswith(suffix)}
        return sorted(found)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_number(value) -> float | None:
    """``value`` as a finite float, or None (not a number, a bool, NaN, inf, or an integer no float holds:
    JSON integers have no limit, and ``float(10**400)`` raises OverflowError). What the run wrote is hostile."""
    if not _number(value):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _finite(value) -> bool:
    return finite_number(value) is not None


def _has_training_keys(row: dict) -> bool:
    """A training step: at least one finite training value (a row of NaN, as another writer's literal NaN
    reads, tells nothing: 40 such steps were 'healthy: no problem found over steps 1-40')."""
    return any(not k.startswith("eval/") and k != "step" and _finite(v) for k, v in row.items())


def load_run(path: str | Path) -> RunData:
    """Read ``path`` (a run directory); a :class:`DataError` naming what is missing when it is not
    a steadyrl run or holds no training step yet."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"RUN_DIR {path} does not exist: give the output directory of a steadyrl train run")
    if not path.is_dir():
        raise DataError(f"RUN_DIR {path} is not a directory: give the output directory of a steadyrl train run "
                        f"(it holds {METRICS_FILE}, config.yaml and {MARKER}), or a CONFIG.yaml for the pre-flight")
    metrics = path / METRICS_FILE
    if not metrics.is_file():
        seen = "it holds a steadyrl marker but" if (path / MARKER).exists() else "it is not a steadyrl run:"
        raise DataError(f"RUN_DIR {path}: {seen} there is no {METRICS_FILE} (expected the output directory of "
                        f"steadyrl train, which holds {METRICS_FILE}, config.yaml and {MARKER})")
    rows = [r for r in read_metrics(path) if _finite(r["step"])]  # a step NaN, inf or 10**400 orders nothing
    run = RunData(path, rows, read_samples(path) if (path / SAMPLES_FILE).is_file() else [], _read_config(path))
    if not run.steps:
        raise DataError(f"RUN_DIR {path}: {METRICS_FILE} holds no training step yet (steps >= 1); "
                        "nothing to diagnose")
    return run


def _read_config(path: Path) -> dict:
    """The run's config.yaml as plain data, or ``{}``: the detectors only quote values from it."""
    import yaml  # a dependency of the config layer; light

    try:
        data = yaml.safe_load(read_text_nofollow(path / "config.yaml"))  # a link: ConfigError
    except FileNotFoundError:
        return {}
    except ConfigError:
        raise
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    # a run of a version before a key was renamed: read under the new names the detectors quote
    return renamed_copy(data) if isinstance(data, dict) else {}


# --- shared statistics ----------------------------------------------------------------------------


def values(series: Series) -> list[float]:
    return [v for _, v in series]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def windows(series: Series, frac: float) -> tuple[Series, Series]:
    """The early and late windows: the first and last ``frac`` of the points, at least 2 each
    (the same points when the series is that short)."""
    k = max(2, int(round(len(series) * frac)))
    return series[:k], series[-k:]


def span(series: Series) -> tuple[float, float]:
    """First and last step of ``series``."""
    return (series[0][0], series[-1][0]) if series else (0.0, 0.0)


def correlation(xs: list[float], ys: list[float]) -> float:
    """Pearson correlation; 0 when either side is constant or shorter than 3."""
    n = min(len(xs), len(ys))
    if n < 3:
        return 0.0
    mx, my = mean(xs[:n]), mean(ys[:n])
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs[:n])
    syy = sum((y - my) ** 2 for y in ys[:n])
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


def aligned(a: Series, b: Series) -> tuple[list[float], list[float]]:
    """The values of ``a`` and ``b`` at the steps both have."""
    bs = dict(b)
    pairs = [(v, bs[s]) for s, v in a if s in bs]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        return 0.0
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def fmt(x: float) -> str:
    """A number for a report: 3 significant digits."""
    return f"{x:.3g}"
