"""Synthetic run directories for the doctor's tests: a healthy run with every metric the detectors
read, noisy as real runs are, and one injection per detector that puts its problem into it."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

STEPS = 40


def healthy_rows(seed: int = 0, steps: int = STEPS) -> list[dict]:
    rng = random.Random(seed)
    n = lambda sd: rng.gauss(0.0, sd)  # noqa: E731
    rows = [{"step": 0, "eval/accuracy": 0.3}]
    for s in range(1, steps + 1):
        rows.append({
            "step": s,
            "actor/entropy": 0.8 - 0.004 * s + n(0.02),
            "actor/pg_clipfrac": abs(0.02 + n(0.005)),
            "actor/grad_norm": 1.0 + abs(n(0.15)),
            "health/skipped_steps": 0,
            "batch/zero_std_group_frac": 0.3 + n(0.05),
            "response/truncated_frac": abs(0.01 + n(0.005)),
            "response/length_mean": 50 + n(3),
            "reward/mean": 0.3 + 0.008 * s + n(0.03),
            "reward/max": 1.0, "reward/min": 0.0, "reward/std": 0.4,
            "reward/correct/mean": 0.3 + 0.008 * s + n(0.03),
            "reward/format/mean": 0.7 + n(0.03),
            "reward/domain/math/count": 64, "reward/domain/code/count": 64,
            "rollout/logprob_diff_mean": 0.002 + n(0.001),
            "rollout/staleness_mean": 1.0, "rollout/tis_clip_frac": abs(0.02 + n(0.005)),
        })
        if s % 10 == 0:
            rows[-1]["eval/accuracy"] = 0.3 + 0.01 * s
    return rows


def healthy_samples(seed: int = 0, steps: int = STEPS, every: int = 5) -> list[dict]:
    rng = random.Random(seed + 1)
    out = []
    for s in range(every, steps + 1, every):
        for i in range(8):
            correct, fmt_ok = float(rng.random() < 0.3 + 0.01 * s), float(rng.random() < 0.7)
            text = "".join(rng.choice("abcdef ") for _ in range(rng.randint(5, 60)))
            out.append({"step": s, "prompt": f"question {s}.{i}", "completion": text, "reward": correct + fmt_ok,
                        "reward/correct": correct, "reward/format": fmt_ok})
    return out


def _set(rows, key, fn):
    for r in rows:
        if r["step"] >= 1:
            r[key] = fn(r["step"])


def _grad_spike(rows, samples):
    rows[25]["actor/grad_norm"] = 30.0


def _skipped(rows, samples):
    for r in rows:
        if r["step"] >= 20:
            r["health/skipped_steps"] = 1 if r["step"] < 22 else 2
        if r["step"] in (20, 22):
            r.pop("actor/grad_norm")


def _reward_vs_heldout(rows, samples):
    for r, acc in zip((r for r in rows if "eval/accuracy" in r), (0.3, 0.5, 0.45, 0.4, 0.35)):
        r["eval/accuracy"] = acc


def _length(rows, samples):
    _set(rows, "response/length_mean", lambda s: 50 + 4 * s + math.sin(s))
    for row in samples:
        row["completion"] = "x" * int(20 * row["reward"] + 3 * row["step"])


def _dominance(rows, samples):
    for i, row in enumerate(samples):
        row["reward/format"] = 1.0 if i % 10 else 0.9
        row["reward"] = row["reward/correct"] + row["reward/format"]


def _domain(rows, samples):
    _set(rows, "reward/domain/math/count", lambda s: 120)
    _set(rows, "reward/domain/code/count", lambda s: 8)


INJECTIONS = {
    "entropy_collapse": lambda rows, samples: _set(rows, "actor/entropy", lambda s: 0.8 * math.exp(-s / 8)),
    "entropy_explosion": lambda rows, samples: _set(rows, "actor/entropy", lambda s: 0.8 + 0.08 * s),
    "clip_drift": lambda rows, samples: _set(rows, "actor/pg_clipfrac", lambda s: 0.02 + 0.01 * s),
    "zero_variance": lambda rows, samples: _set(rows, "batch/zero_std_group_frac", lambda s: min(0.3 + 0.02 * s, 1)),
    "truncation": lambda rows, samples: _set(rows, "response/truncated_frac", lambda s: 0.01 + 0.006 * s),
    "length_hacking": _length,
    "reward_vs_heldout": _reward_vs_heldout,
    "mismatch": lambda rows, samples: _set(rows, "rollout/logprob_diff_mean", lambda s: -(0.002 + 0.004 * s)),
    "grad_spikes": _grad_spike,
    "skipped_steps": _skipped,
    "dominance": _dominance,
    "staleness": lambda rows, samples: _set(rows, "rollout/staleness_mean", lambda s: 3.0),
    "lost_updates": lambda rows, samples: _set(rows, "actor/params_changed_frac", lambda s: 0.012),
    "failed_episodes": lambda rows, samples: _set(rows, "rollout/failed_episode_frac", lambda s: 0.19 + 0.25 * (s % 2)),
    "judge_silent": lambda rows, samples: _set(rows, "reward/judge/criterion/not_a_verdict_frac", lambda s: 0.97),
}
"""Detector name -> ``fn(rows, samples)`` that injects the problem it must name first."""

EXTRA_INJECTIONS = {"dominance_by_domain": ("dominance", _domain)}


def write_run(path: Path, rows: list[dict], samples: list[dict] | None = None, config: str | None = None) -> Path:
    """A run directory as steadyrl train leaves it: marker, config.yaml, metrics and samples."""
    path.mkdir(parents=True, exist_ok=True)
    (path / ".steadyrl-run").write_text('{"steadyrl_run": 1}')
    (path / "config.yaml").write_text(config or "optim:\n  lr: 1.0e-06\nrollout:\n  max_new_tokens: 512\n")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if samples is not None:
        (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    return path


def replay_live(path: Path, rows: list[dict], *, every: int = 10, finish: bool = True) -> None:
    """The in-run doctor of the run at ``path`` fed ``rows`` after the first, as train feeds it each
    step's metrics (no halting, default thresholds); ``finish``: then the end of the run. It prints."""
    from steadyrl.doctor.live import LiveDoctor

    doctor = LiveDoctor(path, {}, every=every, halt_on=[], thresholds={})
    for row in rows[1:]:
        doctor.check(row["step"], {k: v for k, v in row.items() if k != "step"})
    if finish:
        doctor.finish()
