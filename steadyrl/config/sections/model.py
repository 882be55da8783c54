"""``model.*`` (the policy: its source, dtype, LoRA) and ``teacher.*`` (on-policy distillation's teacher).

Part of the typed configuration (:mod:`steadyrl.config.schema` re-exports every section).
"""

from __future__ import annotations


from typing import Literal

from pydantic import Field

from .base import F, MAX_WIDTH, Section


class LoraConfig(Section):
    enabled: bool = F(False, "Train LoRA adapters (PEFT) instead of all weights; the reference "
                      "policy is the base model with the adapter disabled (no second copy).")
    r: int = F(16, "LoRA rank.", ge=1, le=MAX_WIDTH)
    alpha: float = F(32.0, "LoRA alpha (scaling = alpha / r).", gt=0)
    dropout: float = F(0.0, "LoRA dropout.", ge=0, lt=1)
    target_modules: str | list[str] = F("all-linear", "Modules to adapt: 'all-linear' or a list of names.")


class ModelConfig(Section):
    name_or_path: str | None = F(None, "Policy model: a hub name or a local directory "
                                 "(AutoModelForCausalLM). null = the built-in demo model.")
    gguf_file: str | None = F(None, "A GGUF file (llama.cpp's format, often quantised) to train from: "
                              "de-quantised once into a cached model directory (as steadyrl convert "
                              "writes) that the run loads; with name_or_path, a file name in that local "
                              "directory. null = none.")
    tokenizer: str | None = F(None, "Tokenizer hub name or directory; null = the model's.")
    revision: str | None = F(None, "Hub revision (branch, tag or commit) of the model.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = F(
        "auto", "Trained weights dtype (docs/precision.md). auto = float32 weights and optimizer state, "
        "computed in bfloat16 (autocast) on a CUDA GPU that supports it, float32 throughout elsewhere. "
        "bfloat16 / float16 store the weights in that dtype, updated as model.bf16_update says.")
    bf16_update: Literal["kahan", "stochastic_rounding", "master", "plain"] = F(
        "kahan", "How AdamW writes its update into bfloat16/float16 weights (model.dtype bfloat16 or "
        "float16; ignored otherwise): kahan = a compensation buffer keeps what rounding drops (2 more "
        "bytes/param), stochastic_rounding = rounds up or down at random (right on average, no buffer), "
        "master = a float32 master copy in the optimizer (4 more bytes/param), plain = torch's AdamW, "
        "which loses every update below half the weight's spacing (refused when optim.lr < 6.1e-5).")
    trust_remote_code: bool = F(False, "Allow custom modelling code from the hub.")
    attn_implementation: str | None = F(None, "Attention kernel (e.g. sdpa, flash_attention_2); "
                                        "null = transformers' default.")
    gradient_checkpointing: bool = F(False, "Recompute activations in the backward pass to save memory.")
    freeze_vision: bool = F(True, "Vision-language models (docs/vision-data.md): keep the vision tower and its "
                            "projector frozen (requires_grad false; only the language model trains). false = "
                            "train them too. Ignored for text models.")
    critic_name_or_path: str | None = F(None, "Critic backbone for GAE (PPO); null = the policy's.")
    lora: LoraConfig = Field(default_factory=LoraConfig)


class TeacherConfig(Section):
    """On-policy distillation (docs/distillation.md): a frozen teacher scores the student's sampled tokens."""

    name_or_path: str | None = F(None, "Teacher model for on-policy distillation: a hub name or a local directory "
                                 "(AutoModelForCausalLM), loaded like the reference; it must share the policy's "
                                 "tokenizer (same vocabulary). null = no distillation.")
    revision: str | None = F(None, "Hub revision (branch, tag or commit) of the teacher.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = F(
        "auto", "Teacher weights dtype (inference only). auto = bfloat16 on a CUDA GPU that supports it, else float32.")
    device: str | None = F(None, "Device of the teacher's forward (e.g. cuda:1); null = the trainer's device.")
    trust_remote_code: bool = F(False, "Allow the teacher's custom modelling code from the hub.")
    distill_coef: float = F(1.0, "Weight of the per-token distillation reward -coef * (log pi_student - "
                            "log pi_teacher) of each sampled policy token.", ge=0)
    task_rewards: bool = F(True, "Train on the task's rewards too (mixed distillation). false = pure "
                           "distillation: the rewards are still scored and logged (and eval accuracy "
                           "reported) but only the teacher's signal enters the advantage.")
