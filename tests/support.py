"""Helpers shared by test folders and by the data-parallel tests' worker processes.

Everything is built locally (no hub access): a character tokenizer, a tiny causal LM saved with
``save_pretrained``, a fixed training batch, and config files for the tiny model. ``tests/`` is
put on ``sys.path`` by the root conftest, so a test imports this as ``import support``.
"""

from __future__ import annotations

import json
import shutil
import string
from pathlib import Path

import torch
import yaml


# Every float dtype the functional core accepts, widest first. Its outputs are float32, or float64
# for float64 inputs (reductions, exp and log run in float32 or wider).
ALL_DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]


def out_dtype(dtype):
    """The dtype a functional-core result has for inputs of ``dtype``."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# A tool file for multi-turn tests (``rollout.multi_turn.tools: [tools.py:add]``): type hints and an
# Args docstring, as the tool loader requires.
ADD_TOOL_SOURCE = '''
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b
'''


def char_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` over printable ASCII (BOS added on encode)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3}
    for c in string.printable:
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )


def build_tiny_lm(directory, *, n_layers: int = 1, hidden_size: int = 32, n_heads: int = 2, seed: int = 0):
    """A tiny Llama over the demo's character tokenizer, saved with ``save_pretrained``."""
    from steadyrl.demo.model import build_tiny_model
    from steadyrl.demo.task import VOCAB_CHARS
    from steadyrl.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(VOCAB_CHARS)
    model = build_tiny_model(tokenizer, n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads, seed=seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def tiny_batch(seed: int = 0, rows: int = 16, prompt: int = 4, response: int = 6):
    """A fixed :class:`TrainBatch` with ragged responses, advantages, returns, values and
    rollout/reference log-probs (groups of 4 when ``rows`` is a multiple of 4)."""
    from steadyrl.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, 12, (rows, prompt), generator=g)
    response_ids = torch.randint(3, 12, (rows, response), generator=g)
    lengths = torch.randint(1, response + 1, (rows,), generator=g)
    response_mask = (torch.arange(response) < lengths.unsqueeze(1)).long()
    input_ids = torch.cat([prompt_ids, response_ids], 1)
    attention_mask = torch.cat([torch.ones_like(prompt_ids), response_mask], 1)
    return TrainBatch(
        input_ids=input_ids, attention_mask=attention_mask,
        position_ids=(attention_mask.cumsum(-1) - 1).clamp(min=0),
        response_ids=response_ids, response_mask=response_mask, loss_mask=response_mask.clone(),
        advantages=torch.randn(rows, response, generator=g) * response_mask,
        ref_logprobs=-2.5 + 0.3 * torch.randn(rows, response, generator=g),
        old_logprobs=-2.4 + 0.1 * torch.randn(rows, response, generator=g),
        values=0.1 * torch.randn(rows, response, generator=g) * response_mask,
        returns=torch.randn(rows, response, generator=g) * response_mask,
    )


def config_writer(base: dict, path: Path):
    """``write(**sections) -> path``: ``base`` with each given section merged in (a dict updates the
    section, anything else replaces it), written as YAML to ``path``."""

    def write(**sections) -> Path:
        config = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
        for section, values in sections.items():
            if isinstance(values, dict):
                config.setdefault(section, {}).update(values)
            else:
                config[section] = values
        path.write_text(yaml.safe_dump(config))
        return path

    return write


def crashed_copy(run_dir: Path, into: Path, *, last_step: int, steps_kept: int) -> Path:
    """A copy of a finished run as a crash after step ``steps_kept`` would have left it: the
    checkpoint of ``last_step`` and ``summary.json`` gone, ``metrics.jsonl`` cut to the step-0
    eval line and the first ``steps_kept`` steps. The checkpoints up to then stay."""
    shutil.copytree(run_dir, into)
    shutil.rmtree(into / "checkpoints" / f"step_{last_step:06d}")
    (into / "summary.json").unlink(missing_ok=True)
    lines = (into / "metrics.jsonl").read_text().splitlines(keepends=True)
    (into / "metrics.jsonl").write_text("".join(lines[: 1 + steps_kept]))
    return into


def length_reward_runs(model_dir, tmp_path, rollout: dict | None = None, trainer: dict | None = None):
    """``build(*overrides) -> Run``: a run of the tiny model at ``model_dir`` on 16 reversal prompts,
    scored by response length (varied rewards in every group), 2 prompts x 4 samples, one step;
    ``rollout`` / ``trainer``: keys added to those sections."""
    import yaml

    from steadyrl.assembly.setup import build_run
    from steadyrl.config import load_config
    from steadyrl.demo.task import make_splits

    train, _ = make_splits(16, 4, min_len=3, max_len=4, seed=0)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (tmp_path / "rewards.py").write_text(
        "def length(prompts, completions, **columns):\n    return [float(len(c)) for c in completions]\n")

    def build(*overrides):
        config = {"model": {"name_or_path": str(model_dir)}, "data": {"train_path": str(tmp_path / "train.jsonl")},
                  "rewards": [{"name": f"{tmp_path / 'rewards.py'}:length"}],
                  "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 5, "temperature": 0.8,
                              **(rollout or {})},
                  "trainer": {"device": "cpu", "max_steps": 1, **(trainer or {})}}
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return build_run(load_config(str(path), list(overrides)), tmp_path / "run")

    return build


def capture_step(monkeypatch) -> dict:
    """Patch the recipe so that a ``train_step`` leaves, in the dict returned, what reward
    processing returned (``processed``), the batch the update ran on (``batch``) and its metrics
    (``update``)."""
    from steadyrl import recipe

    seen = {}
    real_process, real_update = recipe.process_rewards, recipe.ppo_update

    def process(*args, **kwargs):
        seen["processed"] = real_process(*args, **kwargs)
        return seen["processed"]

    def update(policy, optimizer, batch, *args, **kwargs):
        seen["batch"] = batch
        seen["update"] = real_update(policy, optimizer, batch, *args, **kwargs)
        return seen["update"]

    monkeypatch.setattr(recipe, "process_rewards", process)
    monkeypatch.setattr(recipe, "ppo_update", update)
    return seen
