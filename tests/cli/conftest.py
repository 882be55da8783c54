"""Fixtures of the CLI tests: a tiny model and tokenizer saved to disk, small JSONL files, a user
reward file and a config that trains on them, all built once per session (no download).

``tiny_run`` is the happy path's inputs; the bad-input tests break one thing at a time with an
override. Paths in ``tiny_run.config`` are absolute, so a test may run from any directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

REWARD_SOURCE = '''"""A user reward file, loaded by steadyrl as 'rewards.py:reverse_match'."""


def reverse_match(prompts, completions, answer, **columns):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]
'''


@dataclass(frozen=True)
class TinyRun:
    root: Path
    model: Path
    train: Path
    eval: Path
    reward: str
    config: Path


BAD_FILES = {
    "big_int.yaml": "rollout:\n  max_new_tokens: " + "9" * 5000 + "\n",
    "empty.jsonl": "",
    "malformed.jsonl": '{"prompt": "abc=", "answer": "cba"}\n{"prompt": "abd=", "answer": \n',
    "no_prompt_column.jsonl": '{"question": "abc=", "answer": "cba"}\n{"question": "ab=", "answer": "ba"}\n',
    "reward_without_fn.py": "def something_else(prompts, completions, **kw):\n    return [0.0] * len(completions)\n",
    "broken_reward.py": "def reverse_match(prompts, completions, **kw)\n    return []\n",
}


def _records(n: int, seed: int) -> list[dict]:
    from steadyrl.demo.task import make_splits

    train, _ = make_splits(n, 0, min_len=3, max_len=4, seed=seed)
    return train


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> TinyRun:
    from steadyrl.demo.model import build_tiny_model
    from steadyrl.demo.task import VOCAB_CHARS
    from steadyrl.demo.tokenizer import build_char_tokenizer

    root = tmp_path_factory.mktemp("tiny_run")
    tokenizer = build_char_tokenizer(VOCAB_CHARS)
    model = build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, seed=0)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")

    records = _records(24, seed=0)
    write_jsonl(root / "train.jsonl", records[:16])
    write_jsonl(root / "eval.jsonl", records[16:])
    (root / "rewards.py").write_text(REWARD_SOURCE)
    for name, text in BAD_FILES.items():
        (root / name).write_text(text)

    config = {
        "model": {"name_or_path": str(root / "model")},
        "data": {"train_path": str(root / "train.jsonl"), "eval_path": str(root / "eval.jsonl")},
        "rewards": [{"name": f"{root / 'rewards.py'}:reverse_match"}],
        "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 6},
        "trainer": {"max_steps": 2, "save_every": 0, "num_threads": 1, "samples_every": 0},
        "eval": {"num_samples": 2},
    }
    (root / "cfg.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return TinyRun(root=root, model=root / "model", train=root / "train.jsonl", eval=root / "eval.jsonl",
                   reward=f"{root / 'rewards.py'}:reverse_match", config=root / "cfg.yaml")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="session")
def steadyrl_cli():
    """``steadyrl_cli(*args, cwd=None)``: ``python -m steadyrl ARGS`` in a fresh process, offline,
    one torch thread; returns the ``CompletedProcess`` (text stdout / stderr)."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        return subprocess.run([sys.executable, "-m", "steadyrl", *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout)

    return run
