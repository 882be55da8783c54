"""``demo.*``: the built-in demo tasks' sizes and warm starts.

Part of the typed configuration (:mod:`steadyrl.config.schema` re-exports every section).
"""

from __future__ import annotations


from typing import Literal

from pydantic import model_validator

from .base import F, MAX_SAMPLES, MAX_WIDTH, Section


class DemoConfig(Section):
    """The built-in demo (used when ``data.train_path`` is null): a tiny model learns to reverse
    strings; a short supervised warm-start, then RL. The defaults were measured on 2 CPU cores:
    held-out accuracy ~30% after the warm-start, 81-99% after 600 GRPO steps (8 seeds).
    ``demo.task=tool`` is the multi-turn demo instead (``steadyrl.config.presets.DEMO_TOOL_CONFIG``):
    multiplication with a calculator tool; measured on 2 CPU cores: held-out success 0-6% after
    its warm-start, 78-100% after 60 GRPO steps (3 seeds). ``demo.task=vision`` is the image demo
    (``steadyrl.config.presets.DEMO_VISION_CONFIG``, docs/vision.md)."""

    task: Literal["reverse", "tool", "vision"] = F(
        "reverse", "Which built-in task: reverse (reverse a string, one turn), tool (multiply two numbers with "
        "a calculator tool, multi-turn) or vision (read a codeword off coloured squares with a tiny "
        "vision-language model); on the command line without a config, tool and vision start from their "
        "own settings (steadyrl.config.presets.DEMO_CONFIGS).")
    n_layers: int = F(2, "Transformer layers of the demo model.", ge=1, le=MAX_WIDTH)
    hidden_size: int = F(128, "Hidden size of the demo model.", ge=8, le=MAX_WIDTH)
    n_heads: int = F(4, "Attention heads of the demo model.", ge=1, le=MAX_WIDTH)
    min_len: int = F(3, "Shortest string to reverse.", ge=1)
    max_len: int = F(6, "Longest string to reverse (longer strings leave RL too few right samples "
                     "to climb from).", ge=1, le=MAX_WIDTH)
    num_train: int = F(4000, "Training prompts.", ge=1, le=MAX_SAMPLES)
    num_eval: int = F(500, "Held-out prompts.", ge=1, le=MAX_SAMPLES)
    warmstart_steps: int = F(125, "Supervised warm-start steps before RL (0 = none); stops on purpose "
                             "before the supervised curve's sharp rise, at ~30% held-out accuracy.", ge=0)
    warmstart_lr: float = F(1e-3, "Warm-start learning rate.", gt=0)
    warmstart_batch_size: int = F(32, "Warm-start batch size.", ge=1, le=MAX_SAMPLES)
    tool_skill_steps: int = F(400, "Tool task only: supervised steps on tool transcripts alone, before "
                              "demo.warmstart_steps (the format and copying the numbers in and out).", ge=0)
    tool_skill_lr: float = F(2e-3, "Tool task only: learning rate of the demo.tool_skill_steps.", gt=0)
    tool_fraction: float = F(0.1, "Tool task only: fraction of the demo.warmstart_steps transcripts that call "
                             "the calculator (the rest answer at once), so RL starts from rare tool use.",
                             ge=0, le=1)
    max_images: int = F(3, "Vision task only: most squares in a prompt (1 to 3; each is one letter).", ge=1, le=3)
    decoy_fraction: float = F(0.5, "Vision task only: fraction of the warm-start answers written with a decoy "
                              "colour table (the rest are random letters), so RL starts from a model that "
                              "reads each square but does not know the real table.", ge=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> "DemoConfig":
        if self.min_len > self.max_len:
            raise ValueError(f"min_len ({self.min_len}) must be <= max_len ({self.max_len})")
        if self.hidden_size % self.n_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by n_heads ({self.n_heads})")
        return self
