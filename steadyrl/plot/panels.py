"""The dashboard's panels: which metrics each one draws, its title, units and axes, and which
panels a set of runs gets.

Adding a panel is adding one ``Panel`` to :data:`PANELS`. Series marked ``right`` go on a twin
y axis, which holds a different kind of quantity than the left one (never the same kind on two
scales); ``percent`` axes hold fractions shown as %; ``unit`` axes are fixed to 0–100 % so two
accuracies read against one scale; ``sparse`` series (evaluation) are logged on some steps only
and drawn unsmoothed with markers, as bare points when there are :data:`FEW_POINTS` or fewer.
A panel is left out when none of its metrics was logged, and an ``off_when_zero`` panel also when
every value is 0 (the PPO clip fractions of a run that takes one optimizer step per batch: the
ratio is exactly 1, nothing can clip); the reward functions' panel needs two functions or more.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .data import KL_TERM, Run

FEW_POINTS = 4
"""Sparse series with this many points or fewer (evaluation before and after) are drawn as points:
a line between two evaluations would show values that were never measured."""


@dataclass(frozen=True)
class Line:
    key: str
    label: str
    right: bool = False  # on the twin (right) axis


@dataclass(frozen=True)
class Panel:
    title: str
    lines: tuple[Line, ...] = ()
    ylabel: str = ""
    rlabel: str = ""
    percent: bool = False  # left axis holds fractions, shown as %
    rpercent: bool = False
    sparse: bool = False  # logged on some steps only: markers, no smoothing
    logy: bool = False  # log scale when the left series span more than two decades
    kind: str = "lines"  # or "reward", "time"
    unit: bool = False  # left axis fixed to [0, 1] (shown as 0–100 %)
    extra: str = ""  # regex of further keys drawn on the left axis (eval/pass@1, ...); its group 1: the label
    off_when_zero: bool = False  # left out when every logged value is exactly 0
    min_series: int = 1  # left out (silently) when runs logged some of its keys, but fewer than this

    def keys(self, run: Run) -> list[str]:
        if self.kind == "reward":
            return ["reward/mean", "reward/std", "reward/min", "reward/max"]
        if self.kind == "time":
            return [*TIME_PARTS, "time/step_s"]
        extra = sorted(k for k in run.series if re.fullmatch(self.extra, k)) if self.extra else []
        return [ln.key for ln in self.lines] + extra


TIME_PARTS = {"time/generate_s": "generate", "time/score_s": "score", "time/update_s": "update"}

PANELS = (
    Panel("Reward", ylabel="reward", kind="reward"),
    Panel("Evaluation (held out)", (Line("eval/accuracy", "accuracy"), Line("eval/pass@k", "pass@k")),
          "accuracy, pass rate", percent=True, sparse=True, unit=True, extra=r"eval/pass@\d+"),
    Panel("Reward functions", ylabel="mean reward of each function", extra=r"reward/([^/]+)/mean", min_series=2),
    Panel("Evaluation reward", (Line("eval/reward_mean", "reward mean"),), "reward", sparse=True),
    Panel("Tool use", (Line("rollout/tool_calls_per_episode", "calls per episode"),
          Line("rollout/tool_errors", "errors in the step", right=True)), "tool calls per episode",
          "tool errors per step"),
    Panel("KL to reference", (Line("kl/k3", "k3"), Line("kl/coef", "coefficient", right=True)),
          "KL per token (nats)", "KL coefficient"),
    Panel("KL in the loss (raw)", (Line("actor/kl_loss", "KL estimate, before × coef"),), "KL (nats)"),
    Panel("Policy entropy", (Line("actor/entropy", "entropy"),), "nats per token"),
    Panel("PPO clip fractions", (Line("actor/pg_clipfrac", "total"), Line("actor/pg_clipfrac_low", "low (ratio < 1-ε)"),
          Line("actor/pg_clipfrac_high", "high (ratio > 1+ε)"), Line("actor/pg_clipfrac_dual", "dual clip")),
          "clipped tokens", percent=True, off_when_zero=True),
    Panel("Response length", (Line("response/length_mean", "mean"), Line("response/length_max", "max"),
          Line("response/truncated_frac", "truncated", right=True)), "tokens", "truncated responses", rpercent=True),
    Panel("Optimizer", (Line("actor/grad_norm", "grad norm (before clip)"), Line("actor/lr", "learning rate", right=True)),
          "gradient L2 norm", "learning rate", logy=True),
    Panel("Step time", ylabel="seconds per step", kind="time"),
    Panel("Batch signal", (Line("batch/zero_std_group_frac", "zero-std groups"),
          Line("batch/valid_sample_frac", "samples in loss"), Line("batch/difficulty_kept_frac", "kept by difficulty"),
          Line("reward/valid_frac", "valid rewards"), Line("critic/advantage_clip_frac", "advantage clipped"),
          Line("critic/reward_clip_frac", "reward clipped")), "fraction", percent=True),
    Panel("Losses", (Line("actor/pg_loss", "policy loss"), Line(KL_TERM, "KL term (coef × KL)")), "loss"),
    Panel("Critic (PPO)", (Line("critic/value_loss", "value loss"),
          Line("critic/explained_variance", "explained variance", right=True)), "value loss", "explained variance"),
    Panel("Throughput", (Line("throughput/tokens_per_s", "tokens / s"),), "tokens per second"),
)  # fmt: skip


def reward_functions(run: Run) -> list[str]:
    return sorted(k for k in run.series if re.fullmatch(r"reward/[^/]+/mean", k))


def has_data(panel: Panel, runs: Sequence[Run]) -> bool:
    return any(run.get(k) is not None for run in runs for k in panel.keys(run))


def all_zero(panel: Panel, runs: Sequence[Run]) -> bool:
    """Every value the runs logged for the panel is exactly 0."""
    values = [xy[1] for run in runs for k in panel.keys(run) if (xy := run.get(k)) is not None]
    return bool(values) and all(not np.any(v) for v in values)


def select_panels(runs: Sequence[Run]) -> tuple[list[Panel], list[str], list[str]]:
    """(panels to draw, titles of panels not logged, titles of ``off_when_zero`` panels left out
    because every value is 0) for ``runs``."""
    drawn, missing, zero = [], [], []
    for panel in PANELS:
        logged = max(sum(r.get(k) is not None for k in panel.keys(r)) for r in runs)
        if 0 < logged < panel.min_series:
            continue  # one reward function: its mean is the Reward panel's
        if not has_data(panel, runs):
            missing.append(panel.title)
        elif panel.off_when_zero and all_zero(panel, runs):
            zero.append(panel.title)
        else:
            drawn.append(panel)
    return drawn, missing, zero


def reward_spread(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | None:
    """(steps, low, high, label) of the band drawn around the mean reward: mean ± ``reward/std``,
    cut to [``reward/min``, ``reward/max``] where those are logged (no band edge beyond any sample);
    without ``reward/std``, the min–max range. None when neither is logged."""
    mean, std = run.get("reward/mean"), run.get("reward/std")
    lo, hi = run.get("reward/min"), run.get("reward/max")
    if mean is not None and std is not None:
        steps, i, j = np.intersect1d(mean[0], std[0], return_indices=True)
        low, high = mean[1][i] - std[1][j], mean[1][i] + std[1][j]
        if lo is not None:
            low = np.maximum(low, _at(steps, lo, -np.inf))
        if hi is not None:
            high = np.minimum(high, _at(steps, hi, np.inf))
        return steps, low, high, "± 1 std"
    if lo is not None and hi is not None:
        steps, i, j = np.intersect1d(lo[0], hi[0], return_indices=True)
        return steps, lo[1][i], hi[1][j], "min–max"
    return None


def _at(steps: np.ndarray, xy: tuple[np.ndarray, np.ndarray], default: float) -> np.ndarray:
    """Values of ``xy`` at ``steps``, ``default`` where it was not logged."""
    out = np.full(len(steps), default)
    found = np.isin(steps, xy[0])
    out[found] = xy[1][np.searchsorted(xy[0], steps[found])]
    return out
