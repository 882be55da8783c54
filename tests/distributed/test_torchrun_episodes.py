"""Multi-turn episodes under ``torchrun --nproc_per_node 2`` (gloo): each rank runs the episodes
of its own prompts (whole groups), the episodes' metrics are those of every rank's episodes, and
the environments of the two ranks get different seeds (the seed comes from the sample's global
row, not the rank's local one)."""

from __future__ import annotations

import json

import yaml
from dp_common import torchrun

from steadyrl.tracking import read_metrics

ENV = '''
import json, os


class Seeds:
    """Two turns; writes each episode's seed to a file named after its rank (it runs in a sandbox
    worker of the rank's trainer process, which keeps RANK in its environment)."""

    def reset(self, prompt, answer, seed, **row):
        self.turn = 0
        with open(os.path.join(os.environ["SEED_DIR"], f"rank{os.environ['RANK']}.txt"), "a") as f:
            f.write(f"{seed}\\n")
        return None

    def step(self, text):
        self.turn += 1
        return "again", 1.0, self.turn >= 2
'''


def test_two_ranks_run_episodes_with_distinct_seeds(tmp_path, monkeypatch):
    from agents.templates import QWEN25, chat_tokenizer
    from steadyrl.demo.model import build_tiny_model

    tokenizer = chat_tokenizer(QWEN25, bos="<|begin_of_text|>")
    build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, seed=0,
                     max_positions=1024).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    rows = [{"prompt": f"What is {a}+{a}?", "answer": str(2 * a)} for a in range(8)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "env.py").write_text(ENV)
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    config = {
        "model": {"name_or_path": str(tmp_path / "model")},
        "data": {"train_path": str(tmp_path / "train.jsonl")},
        "rollout": {"prompts_per_step": 4, "group_size": 2, "max_new_tokens": 6,
                    "multi_turn": {"max_turns": 2, "max_observation_tokens": 32,
                                   "environment": f"{tmp_path / 'env.py'}:Seeds"}},
        "trainer": {"max_steps": 2, "save_every": 0, "device": "cpu", "num_threads": 1, "samples_every": 0},
        "eval": {"num_samples": 0},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("SEED_DIR", str(seeds))
    out = tmp_path / "run"
    proc = torchrun(["-m", "steadyrl", "train", str(tmp_path / "config.yaml"), "--output-dir", str(out)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = [m for m in read_metrics(out / "metrics.jsonl") if "rollout/turns_mean" in m]
    assert len(steps) == 2 and all(m["rollout/retokenize_drift"] == 0.0 for m in steps)
    per_rank = [set(p.read_text().split()) for p in seeds.glob("*.txt")]
    assert len(per_rank) == 2, "each rank ran its own episodes"
    assert sum(len(s) for s in per_rank) == 2 * 4 * 2  # 2 steps x 8 episodes, every seed distinct
    assert not per_rank[0] & per_rank[1]
