"""The dashboard's panels: which metrics each one draws, its title, units and axes.

Adding a panel is adding one ``Panel`` to :data:`PANELS`. Series marked ``right`` go on a twin
y axis; ``percent`` axes hold fractions shown as %; ``sparse`` series (evaluation) are logged
on some steps only and drawn with markers, unsmoothed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .data import Run


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

    def keys(self, run: Run) -> list[str]:
        if self.kind == "reward":
            return ["reward/mean", "reward/min", "reward/max", *reward_functions(run)]
        if self.kind == "time":
            return [*TIME_PARTS, "time/step_s"]
        eval_extra = [k for k in run.series if re.fullmatch(r"eval/pass@\d+", k)] if self.sparse else []
        return [ln.key for ln in self.lines] + eval_extra


TIME_PARTS = {"time/generate_s": "generate", "time/score_s": "score", "time/update_s": "update"}

PANELS = (
    Panel("Reward", ylabel="reward", kind="reward"),
    Panel("Evaluation (held out)", (Line("eval/accuracy", "accuracy"), Line("eval/pass@k", "pass@k"),
          Line("eval/reward_mean", "reward mean", right=True)), "accuracy", "reward", percent=True, sparse=True),
    Panel("KL to reference", (Line("kl/k3", "k3"), Line("kl/coef", "coefficient", right=True)),
          "KL per token (nats)", "KL coefficient"),
    Panel("Policy entropy", (Line("actor/entropy", "entropy"),), "nats per token"),
    Panel("PPO clip fractions", (Line("actor/pg_clipfrac", "total"), Line("actor/pg_clipfrac_low", "low (ratio < 1-ε)"),
          Line("actor/pg_clipfrac_high", "high (ratio > 1+ε)"), Line("actor/pg_clipfrac_dual", "dual clip")),
          "clipped tokens", percent=True),
    Panel("Response length", (Line("response/length_mean", "mean"), Line("response/length_max", "max"),
          Line("response/truncated_frac", "truncated", right=True)), "tokens", "truncated responses", rpercent=True),
    Panel("Optimizer", (Line("actor/grad_norm", "grad norm (before clip)"), Line("actor/lr", "learning rate", right=True)),
          "gradient L2 norm", "learning rate", logy=True),
    Panel("Step time", ylabel="seconds per step", kind="time"),
    Panel("Batch signal", (Line("batch/zero_std_group_frac", "zero-std groups"),
          Line("batch/valid_sample_frac", "samples in loss"), Line("batch/difficulty_kept_frac", "kept by difficulty"),
          Line("reward/valid_frac", "valid rewards"), Line("critic/advantage_clip_frac", "advantage clipped"),
          Line("critic/reward_clip_frac", "reward clipped")), "fraction", percent=True),
    Panel("Losses", (Line("actor/pg_loss", "policy"), Line("actor/kl_loss", "KL term")), "loss"),
    Panel("Critic (PPO)", (Line("critic/value_loss", "value loss"),
          Line("critic/explained_variance", "explained variance", right=True)), "value loss", "explained variance"),
    Panel("Throughput", (Line("throughput/tokens_per_s", "tokens / s"),), "tokens per second"),
)  # fmt: skip


def reward_functions(run: Run) -> list[str]:
    return sorted(k for k in run.series if re.fullmatch(r"reward/.+/mean", k))


def has_data(panel: Panel, runs: Sequence[Run]) -> bool:
    return any(run.get(k) is not None for run in runs for k in panel.keys(run))


