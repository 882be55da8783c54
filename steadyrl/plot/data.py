"""A run's ``metrics.jsonl`` as plottable series, and the smoothing the dashboard applies."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, DataError
from ..files import read_text_nofollow
from ..printable import printable
from ..tracking import METRICS_FILE, STATE_FILE, read_metrics

RAW_POINTS_MAX = 30
"""Series this short are drawn raw, with markers; longer ones get an EMA over faint raw values."""

KL_TERM = "plot/kl_coef_x_kl_loss"
"""A series derived here, not logged: the KL term the policy loss gets, ``kl/coef × actor/kl_loss``.
The coefficient is the one logged at the step before (the value the step's loss used: ``kl/coef``
is logged after the step's adaptive update); at the first step, the step's own."""


def label(text: object) -> str:
    """A run's own text (its name, a reward function's name) as drawn: control characters as
    visible escapes and ``$`` escaped, so matplotlib shows it instead of parsing it as math."""
    return printable(text, keep="").replace("$", r"\$")


@dataclass
class Run:
    """A run's metrics as ``key -> (steps, values)``, finite values only."""

    name: str
    series: dict[str, tuple[np.ndarray, np.ndarray]]

    def get(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        return self.series.get(key)

    def skipped_steps(self) -> np.ndarray:
        """Steps at which ``health/skipped_steps`` (cumulative) went up."""
        s = self.get("health/skipped_steps")
        if s is None:
            return np.array([])
        steps, counts = s
        return steps[np.diff(counts, prepend=0.0) > 0]


def load_run(run_dir: str | Path) -> Run:
    """Read ``run_dir/metrics.jsonl``; a DataError when it is missing or holds no step."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    if not rows:
        where = run_dir if run_dir.suffix == ".jsonl" else run_dir / METRICS_FILE
        state = "is empty" if where.exists() else "does not exist"
        raise DataError(f"{where} {state}: nothing to plot (is RUN_DIR the run's output directory?)")
    cols: dict[str, tuple[list, list]] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                if np.isfinite(value):
                    key = label(key)  # a reward's name is the run's text: drawn as it is, never as markup
                    cols.setdefault(key, ([], []))[0].append(row["step"])
                    cols[key][1].append(float(value))
    series = {k: (np.asarray(s, dtype=float), np.asarray(v, dtype=float)) for k, (s, v) in cols.items()}
    series.update(derived_series(series))
    name = run_dir.parent.name if run_dir.suffix == ".jsonl" else run_dir.name
    state_file = (run_dir.parent if run_dir.suffix == ".jsonl" else run_dir) / STATE_FILE
    if state_file.exists() or state_file.is_symlink():
        try:
            name = json.loads(read_text_nofollow(state_file)).get("run_name") or name
        except ConfigError:  # a link: refused, not skipped
            raise
        except (ValueError, OSError):
            pass
    return Run(label(name) or "run", series)


def derived_series(series: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The series the dashboard computes from logged ones: :data:`KL_TERM`."""
    kl, coef = series.get("actor/kl_loss"), series.get("kl/coef")
    if kl is None or coef is None:
        return {}
    before = np.searchsorted(coef[0], kl[0], side="left") - 1  # the last coefficient logged before each step
    same = np.searchsorted(coef[0], kl[0], side="left")
    own = (same < len(coef[0])) & (coef[0][np.minimum(same, len(coef[0]) - 1)] == kl[0])
    index = np.where(before >= 0, before, np.where(own, same, -1))
    keep = index >= 0
    if not keep.any():
        return {}
    return {KL_TERM: (kl[0][keep], kl[1][keep] * coef[1][index[keep]])}


def ema(values: np.ndarray, span: float) -> np.ndarray:
    """Debiased exponential moving average: ``s_t = (1-a) s_{t-1} + a x_t``, ``a = 2 / (span + 1)``,
    divided by ``1 - (1-a)^t`` so the start is not pulled towards 0."""
    if span <= 1 or len(values) < 2:
        return values
    a, s, w = 2.0 / (span + 1.0), 0.0, 0.0
    out = np.empty_like(values)
    for i, x in enumerate(values):
        s, w = (1 - a) * s + a * x, (1 - a) * w + a
        out[i] = s / w
    return out


def smoothing_span(n: int) -> float:
    """EMA span for a series of ``n`` points: none up to RAW_POINTS_MAX, then ``n / 30``."""
    return 1.0 if n <= RAW_POINTS_MAX else n / 30.0


