"""A real model end to end: SmolLM2-135M-Instruct, downloaded once as a Q4_1 GGUF (support_smollm),
becomes a model directory with ``steadyrl convert`` that keeps the GGUF's tokenizer, ChatML template
and end token, generates, and trains two GRPO steps with ``steadyrl train``; and the reasoning-gym
example (examples/smollm2_reasoning_gym.yaml) runs as shipped, cut to two steps, and evaluates.

Marked slow (about a minute on two cores, most of it the de-quantisation); skipped, with the
reason, only when the model cannot be downloaded.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

import support_smollm
from steadyrl import cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """``(gguf_path, converted_dir)``: the cached GGUF and this session's conversion of it."""
    gguf_path = support_smollm.smollm2_gguf()
    out = tmp_path_factory.mktemp("smollm2") / "model"
    assert cli.main(["convert", str(gguf_path), str(out)]) == 0
    return gguf_path, out


def test_converted_smollm2_keeps_the_ggufs_vocabulary_chatml_template_and_end_token(smollm2):
    import gguf
    from transformers import GenerationConfig

    from steadyrl.convert import read_gguf
    from steadyrl.models import load_tokenizer

    gguf_path, out = smollm2
    info = read_gguf(gguf_path)
    tokenizer = load_tokenizer(str(out))
    assert tokenizer.chat_template == info.chat_template
    tokens = gguf.GGUFReader(gguf_path).fields["tokenizer.ggml.tokens"].contents()
    assert tokenizer.convert_ids_to_tokens(list(range(len(tokens)))) == tokens
    assert info.end_token_ids == [tokenizer.eos_token_id] and tokenizer.eos_token == "<|im_end|>"
    generation = GenerationConfig.from_pretrained(out)
    assert (generation.eos_token_id, generation.bos_token_id) == (tokenizer.eos_token_id, info.bos_token_id)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                         tokenize=False)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_converted_smollm2_answers_and_stops_at_its_end_token(smollm2):
    from transformers import GenerationConfig

    from steadyrl.models import load_policy, load_tokenizer

    _, out = smollm2
    tokenizer = load_tokenizer(str(out))
    model = load_policy(str(out), dtype=torch.float32, device=torch.device("cpu"))
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)
    config = GenerationConfig.from_pretrained(out)
    config.update(max_new_tokens=16, do_sample=False)
    with torch.no_grad():
        new = model.generate(**ids, generation_config=config)[0, ids["input_ids"].shape[1]:]
    assert new[-1].item() == tokenizer.eos_token_id and len(new) < 16  # it ended the turn itself
    assert "5" in tokenizer.decode(new, skip_special_tokens=True)


def test_steadyrl_train_runs_grpo_steps_on_smollm2(smollm2, tmp_path):
    _, model_dir = smollm2
    rows = [{"prompt": [{"role": "user", "content": f"Which number is larger, {a} or {b}? "
                         "Reply in the form: The answer is N."}], "answer": str(max(a, b))}
            for a, b in [(3, 9), (41, 17), (8, 80), (55, 54)]]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = {
        "model": {"name_or_path": str(model_dir), "dtype": "float32"},
        "data": {"train_path": str(tmp_path / "train.jsonl")},
        "rewards": [{"name": "normalized_match", "options": {"marker": "The answer is"}},
                    {"name": "regex_format", "weight": 0.2, "options": {"pattern": "The answer is", "mode": "search"}}],
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 6},
        "optim": {"lr": 1e-5},
        "trainer": {"max_steps": 2, "micro_batch_size": 4, "save_every": 0, "samples_every": 0, "num_threads": 1},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    assert cli.main(["train", str(tmp_path / "config.yaml"), "--output-dir", str(run)]) == 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [row for row in metrics if "actor/grad_norm" in row]
    assert [row["step"] for row in steps] == [1, 2]
    assert all(math.isfinite(row["actor/grad_norm"]) and row["response/length_mean"] > 0 for row in steps)
    final = sorted((run / "checkpoints").iterdir())[-1]
    saved = next(p for p in final.rglob("tokenizer_config.json")).parent
    from steadyrl.models import load_tokenizer

    assert load_tokenizer(str(saved)).chat_template == load_tokenizer(str(model_dir)).chat_template


def test_the_reasoning_gym_example_trains_and_evaluates_on_smollm2(smollm2, tmp_path):
    """examples/smollm2_reasoning_gym.yaml as shipped, cut to two small steps: the held-out accuracy
    (before and after) and the task's reward are logged and finite (README: the full run's numbers)."""
    pytest.importorskip("reasoning_gym", reason="pip install 'steadyrl[reasoning-gym]'")
    from pathlib import Path

    _, model_dir = smollm2
    example = Path(__file__).resolve().parents[2] / "examples" / "smollm2_reasoning_gym.yaml"
    run = tmp_path / "run"
    assert cli.main(["train", str(example), "--output-dir", str(run), f"model.name_or_path={model_dir}",
                     "trainer.max_steps=2", "trainer.num_threads=1", "trainer.eval_every=0", "trainer.samples_every=0",
                     "rollout.prompts_per_step=2", "rollout.group_size=4", "data.max_eval_prompts=8"]) == 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [row for row in metrics if "eval/accuracy" in row]
    assert [row["step"] for row in evals] == [0, 2] and all(row["eval/num_prompts"] == 8 for row in evals)
    assert all(0.0 <= row["eval/accuracy"] <= 1.0 for row in evals)
    steps = [row for row in metrics if "actor/grad_norm" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert math.isfinite(row["actor/grad_norm"]) and 0.0 <= row["reward/reasoning_gym/mean"] <= 1.0
        assert row["reward/valid_frac"] == 1.0 and row["response/length_mean"] > 0
