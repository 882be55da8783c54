"""Building the tool demo's warm-started model: tokenizer, tiny model, two supervised phases.

1. A BPE chat tokenizer (:mod:`.chat_tokenizer`) trained on rendered transcripts of the training
   questions, half of them calling the calculator, so both kinds of turn are short.
2. A tiny Llama model (:mod:`.model`) with room for a whole episode (``max_positions``).
3. Skill phase (``tool_skill_steps`` at ``tool_skill_lr``): tool transcripts only. The model learns the Hermes call
   format and to copy the factors into the call and the result into the answer; copying is
   learned in a few hundred steps this way (loss ~0.001 after 500 steps for seeds 0 and 1, 0.03
   for seed 2), while a mix with 30% tool transcripts did not learn it in 1,200 steps (measured;
   the direct answers' digits, which the model cannot compute, swamp the gradient).
4. Preference phase (``warmstart_steps`` at ``warmstart_lr``): a mix where only
   ``tool_fraction`` of the transcripts call the tool, the rest answering at once (a guess the
   model cannot get right). Measured with the demo's settings: greedy held-out success 0-6%; a
   sampled policy calls the tool in a few percent of episodes and starts many more calls that it
   botches. RL has to find out that calling the tool (correctly) pays.
"""

from __future__ import annotations

import time

from .calculator import calculate
from .chat_tokenizer import build_chat_tokenizer
from .model import build_tiny_model
from .tool_task import warmstart_transcripts
from .tool_warmstart import encode_transcripts
from .warmstart import SupervisedSettings, train_supervised

__all__ = ["TOOL_SPEC", "tool_schemas", "build_tool_demo"]

TOOL_SPEC = "steadyrl.demo.calculator:calculate"
"""How the tool demo's config names its tool (``rollout.multi_turn.tools``)."""

MAX_POSITIONS = 128
"""Positions of the tool demo's model: a prompt (~17 tokens) and a whole episode fit."""


def tool_schemas() -> list[dict]:
    """The JSON schema of the calculator, as the chat template receives it."""
    from transformers.utils import get_json_schema

    return [get_json_schema(calculate)]


def _train_tokenizer(train: list[dict], seed: int):
    tools = tool_schemas()
    plain = build_chat_tokenizer(["x"])  # only its template is used, to render the corpus
    corpus = [plain.apply_chat_template(t, tools=tools, tokenize=False)
              for t in warmstart_transcripts(train[:1000], 0.5, seed=seed)]
    return build_chat_tokenizer(corpus)


def build_tool_demo(demo, train: list[dict], *, seed: int):
    """``(model, tokenizer, info)``: the tool demo's warm-started model (``demo`` is the config's
    ``demo`` section); ``info`` holds each phase's steps, first and last loss, and seconds."""
    start = time.perf_counter()
    tokenizer = _train_tokenizer(train, seed)
    model = build_tiny_model(tokenizer, n_layers=demo.n_layers, hidden_size=demo.hidden_size,
                             n_heads=demo.n_heads, max_positions=MAX_POSITIONS, seed=seed)
    tools = tool_schemas()
    info = {}
    phases = (("skill", 1.0, demo.tool_skill_steps, demo.tool_skill_lr),
              ("preference", demo.tool_fraction, demo.warmstart_steps, demo.warmstart_lr))
    for k, (name, fraction, steps, lr) in enumerate(phases):
        if not steps:
            continue
        rows = encode_transcripts(tokenizer, warmstart_transcripts(train, fraction, seed=seed + k), tools)
        out = train_supervised(model, *rows, SupervisedSettings(steps, lr, demo.warmstart_batch_size, seed + k))
        info[name] = {"steps": steps, "loss_first": out["losses"][0], "loss_last": out["losses"][-1],
                      "seconds": out["seconds"]}
    info["seconds"] = time.perf_counter() - start
    return model.eval(), tokenizer, info
