"""TRL-style reward functions end to end: ``steadyrl train`` with a reward file written the way
TRL's documentation writes them, on standard (text) prompts and on conversational (message list)
prompts; every function scores every sample of every step (no call fails)."""

from __future__ import annotations

import json
import shutil

import yaml

from steadyrl import cli
from steadyrl.tracking import read_jsonl

TRL_REWARDS = '''"""Reward functions in the styles of TRL's GRPOTrainer documentation."""


def reward_len(completions, **kwargs):
    return [-abs(4 - len(completion)) for completion in completions]


def accuracy(completions, answer, **kwargs):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def token_count(completion_ids, **kwargs):
    assert all(isinstance(i, int) for ids in completion_ids for i in ids)
    return [float(len(ids)) for ids in completion_ids]


def chat_accuracy(completions, answer, **kwargs):
    contents = [completion[0]["content"] for completion in completions]
    assert all(completion[0]["role"] == "assistant" for completion in completions)
    assert all(isinstance(prompt, list) and prompt[-1]["role"] == "user" for prompt in kwargs["prompts"])
    return [float(c.strip() == a) for c, a in zip(contents, answer)]
'''


def _metrics(out) -> list[dict]:
    return [m for m in read_jsonl(out / "metrics.jsonl") if m["step"] > 0]


def _train(tiny_run, tmp_path, rewards: list[str], *overrides: str):
    path = tmp_path / "trl_rewards.py"
    path.write_text(TRL_REWARDS)
    items = ", ".join(f"{{name: '{path}:{fn}'}}" for fn in rewards)
    out = tmp_path / "run"
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(out), f"rewards=[{items}]",
                     "trainer.max_steps=2", "eval.num_samples=0", *overrides])
    return code, out


def test_trl_style_rewards_on_text_prompts(tiny_run, tmp_path, capsys):
    code, out = _train(tiny_run, tmp_path, ["reward_len", "accuracy", "token_count"])
    assert code == 0, capsys.readouterr().err
    for m in _metrics(out):
        for name in ("reward_len", "accuracy", "token_count"):
            assert m[f"reward/{name}/failed"] == 0, (name, m)
        assert m["reward/token_count/mean"] >= 1  # at least one token each (an EOS counts)
    assert "failed on some samples" not in capsys.readouterr().out


def test_trl_style_rewards_on_conversational_prompts(tiny_run, tmp_path, capsys):
    model = tmp_path / "chat_model"
    shutil.copytree(tiny_run.model, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    for name, source in (("train", tiny_run.train), ("eval", tiny_run.eval)):
        rows = [json.loads(line) for line in source.read_text().splitlines()]
        chat = [{**r, "prompt": [{"role": "user", "content": r["prompt"]}]} for r in rows]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat))
    code, out = _train(tiny_run, tmp_path, ["chat_accuracy", "token_count"], f"model.name_or_path={model}",
                       f"data.train_path={tmp_path / 'train.jsonl'}", f"data.eval_path={tmp_path / 'eval.jsonl'}")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "failed on some samples" not in printed.out, printed.out
    for m in _metrics(out):
        assert m["reward/chat_accuracy/failed"] == 0 and m["reward/token_count/failed"] == 0
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["model"]["name_or_path"] == str(model)
