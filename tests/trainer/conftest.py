"""Fixtures of the trainer tests: reverse-a-string prompts on disk, a user reward file, and a
helper that writes a config for the tiny model and runs ``steadyrl train`` in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REWARD = '''def reverse_match(prompts, completions, answer, **columns):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def partial_reverse(prompts, completions, answer, **columns):
    """Fraction of leading characters right: a dense signal a tiny model can climb quickly."""
    out = []
    for c, a in zip(completions, answer):
        c = c.strip()
        hits = sum(1 for x, y in zip(c, a) if x == y)
        out.append(hits / max(len(a), len(c), 1))
    return out
'''


@pytest.fixture(scope="session")
def task_dir(tmp_path_factory) -> Path:
    from steadyrl.demo.task import make_splits

    root = tmp_path_factory.mktemp("task")
    train, held_out = make_splits(64, 16, min_len=3, max_len=4, seed=0)
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (root / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held_out))
    (root / "rewards.py").write_text(REWARD)
    return root


@pytest.fixture
def write_config(tiny_model_dir, task_dir, tmp_path):
    """``write_config(**sections) -> path``: a config for the tiny model and task, sections merged in."""
    import support

    return support.config_writer({
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"train_path": str(task_dir / "train.jsonl"), "eval_path": str(task_dir / "eval.jsonl")},
        "rewards": [{"name": f"{task_dir / 'rewards.py'}:reverse_match"}],
        "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 6},
        "trainer": {"max_steps": 2, "save_every": 0, "samples_every": 0, "micro_batch_size": 8},
        "eval": {"num_samples": 0},
    }, tmp_path / "config.yaml")
