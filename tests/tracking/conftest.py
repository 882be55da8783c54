"""A synthetic but realistic GRPO run log (names from docs/metrics.md), for the reader and plot tests."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest


def write_synthetic_run(run_dir: Path, steps: int = 200, seed: int = 0, *, ppo: bool = False, lift: float = 0.45) -> Path:
    """Write ``run_dir/metrics.jsonl`` as a steadyrl run would: reward rising, KL growing (a KL loss
    term unless ``ppo``), entropy falling, eval every 25 steps, two skipped steps (their losses null), a few nulls, and a last
    line cut short by a "crash"."""
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    skipped = {int(steps * 0.37), int(steps * 0.71)}
    lines, n_skipped = [], 0
    for step in range(1, steps + 1):
        t = step / steps
        acc = float(np.clip(0.2 + lift * (1 - math.exp(-3 * t)) + rng.normal(0, 0.05), 0, 1))
        fmt = float(np.clip(0.6 + 0.35 * t + rng.normal(0, 0.04), 0, 1))
        n_skipped += step in skipped
        gen, score, update = 2.0 + 0.8 * t + rng.normal(0, 0.1), 0.3 + rng.normal(0, 0.03), 1.1 + rng.normal(0, 0.05)
        row = {
            "step": step, "epoch": step / 50,
            "reward/mean": 0.8 * acc + 0.2 * fmt, "reward/std": 0.8 * math.sqrt(acc * (1 - acc)) + 0.03, "reward/min": 0.0, "reward/max": 1.0 if step > 3 else 0.8,
            "reward/accuracy/mean": acc, "reward/format/mean": fmt, "reward/accuracy/failed": 0,
            "reward/valid_frac": 1.0 - 0.02 * rng.random(),
            "critic/advantage_clip_frac": 0.01 * rng.random(), "critic/reward_clip_frac": 0.0,
            "kl/k1": 0.002 + 0.02 * t, "kl/k3": 0.001 + 0.015 * t * (1 + 0.2 * rng.normal()), "kl/coef": 0.04 * (1 - 0.5 * t),
            "actor/pg_loss": float(rng.normal(0, 0.02)), "actor/entropy": 1.4 * math.exp(-1.2 * t) + 0.2 + rng.normal(0, 0.02),
            "actor/pg_clipfrac": 0.02 + 0.01 * rng.random(), "actor/pg_clipfrac_low": 0.008 + 0.004 * rng.random(),
            "actor/pg_clipfrac_high": 0.012 + 0.006 * rng.random(), "actor/pg_clipfrac_dual": 0.0005 * rng.random(),
            "actor/grad_norm": float(0.3 * math.exp(rng.normal(0, 0.3)) * (60 if step in (30, 31) else 1)),
            "actor/lr": 1e-6 * min(1.0, step / 20),
            "response/length_mean": 180 + 120 * t + rng.normal(0, 10), "response/length_max": 512 if step % 3 else 470,
            "response/length_min": 20, "response/truncated_frac": max(0.0, 0.02 + 0.08 * t + rng.normal(0, 0.02)),
            "prompt/length_mean": 95, "batch/zero_std_group_frac": float(np.clip(0.5 - 0.3 * t + rng.normal(0, 0.05), 0, 1)),
            "batch/valid_sample_frac": 1.0, "batch/difficulty_kept_frac": 0.7 + 0.1 * rng.random(),
            "time/generate_s": gen, "time/score_s": score, "time/update_s": update, "time/step_s": gen + score + update + 0.1,
            "throughput/tokens_per_s": 2500 + 100 * rng.normal(), "health/skipped_steps": n_skipped, "health/warnings": n_skipped,
        }  # fmt: skip
        if not ppo:  # GRPO: the KL is a loss term (kl_mode loss)
            row["actor/kl_loss"] = row["kl/k3"] * (1 + 0.1 * rng.normal())
        if ppo:
            row.update({"critic/value_loss": 0.2 * math.exp(-2 * t) + 0.01, "critic/explained_variance": 0.8 * t})
        if step in skipped:
            row["actor/pg_loss"] = None  # non-finite -> null
            row["actor/grad_norm"] = None
            row.update({"actor/kl_loss": None} if not ppo else {})
        if step % 17 == 0:
            row["kl/k3"] = None
        if step % 25 == 0 or step == 1:
            row.update({"eval/accuracy": acc + 0.03, "eval/pass@k": min(1.0, acc + 0.2), "eval/reward_mean": acc})
        lines.append(json.dumps(row))
    text = "\n".join(lines) + "\n" + '{"step": ' + str(steps + 1) + ', "reward/mean": 0.5, "kl/'  # the crash
    (run_dir / "metrics.jsonl").write_text(text)
    return run_dir


@pytest.fixture
def synthetic_run(tmp_path: Path) -> Path:
    """A 60-step run in ``tmp_path/grpo-demo`` (the 61st line cut short)."""
    return write_synthetic_run(tmp_path / "grpo-demo", steps=60)


@pytest.fixture
def make_run():
    """``write_synthetic_run`` itself, for tests that need other shapes of run."""
    return write_synthetic_run
