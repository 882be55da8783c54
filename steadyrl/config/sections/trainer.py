"""``optim.*`` (AdamW, schedule, gradient clip) and ``trainer.*`` (steps, batches, log-probs, devices,
checkpoints, trackers, the doctor).

Part of the typed configuration (:mod:`steadyrl.config.schema` re-exports every section).
"""

from __future__ import annotations


from typing import Any, Literal

from pydantic import ValidationInfo, field_validator

from ...functional.constants import (
    MAX_GRAD_NORM,
)
from .base import Beta, F, MAX_SAMPLES, MAX_TOKENS, Section


class OptimConfig(Section):
    lr: float = F(1e-6, "Policy learning rate (AdamW).", gt=0)
    critic_lr: float = F(1e-5, "Critic learning rate (PPO).", gt=0)
    weight_decay: float = F(0.0, "AdamW weight decay.", ge=0)
    betas: tuple[Beta, Beta] = F((0.9, 0.999), "AdamW betas, each in [0, 1).")
    eps: float = F(1e-8, "AdamW epsilon.", gt=0)
    schedule: Literal["constant", "linear", "cosine"] = F("constant", "Learning-rate decay after warm-up.")
    warmup_steps: int = F(0, "Linear warm-up steps.", ge=0)
    min_lr_ratio: float = F(0.0, "Final learning rate of linear/cosine decay, as a fraction of lr.", ge=0, le=1)
    max_grad_norm: float = F(MAX_GRAD_NORM, "Clip the gradient norm to this (ROLL's PPO defaults).", gt=0)


class TrainerConfig(Section):
    max_steps: int = F(100, "Training steps (one step = one batch of prompts).", ge=1)
    max_epochs: float | None = F(None, "Stop after this many passes over the training prompts, if that "
                                 "comes before max_steps (the schedule decays over the shorter); "
                                 "null = max_steps only.", gt=0)
    seed: int = F(42, "Seed of data order, sampling and initialisation.")
    ppo_epochs: int = F(1, "Passes over each rollout batch.", ge=1, le=MAX_SAMPLES)
    mini_batch_size: int | None = F(None, "Samples per optimizer step; null = the whole batch "
                                    "(one optimizer step per epoch).", ge=1, le=MAX_SAMPLES)
    micro_batch_size: int = F(8, "Samples per forward/backward (gradient accumulation).", ge=1, le=MAX_SAMPLES)
    max_tokens_per_micro_batch: int | None = F(
        None, "Token budget per forward/backward instead of micro_batch_size: rows sorted by length and "
        "packed so that rows x padded length (prompt + response) <= budget, a longer row alone; each "
        "micro-batch trimmed to its longest row. Same gradient (global loss denominators), less padding "
        "on mixed lengths. null = micro_batch_size rows each.", ge=1, le=MAX_TOKENS)
    padding_free: bool = F(
        False, "Run each micro-batch's forward passes as one packed row without padding: the sequences' "
        "real tokens back to back, position ids restarting per sequence, no attention mask; transformers "
        "keeps them apart (flash_attention_2: the varlen kernel; sdpa / eager: a block-diagonal mask, "
        "attention over the whole packed row, so slower on CPU for many rows). Same log-probs; checked "
        "against the padded forward at start-up. No prompt sharing then; the critic stays padded. With "
        "max_tokens_per_micro_batch the budget counts real tokens.")
    save_every: int = F(50, "Checkpoint every N steps (and at the end); 0 = only at the end.", ge=0)
    keep_checkpoints: int = F(2, "Keep the newest N checkpoints.", ge=1)
    eval_every: int = F(0, "Evaluate every N steps; 0 = only before and after training.", ge=0)
    samples_every: int = F(10, "Log a table of sample completions every N steps; 0 = never.", ge=0)
    logprob_impl: Literal["fused", "naive", "chunked_grad"] = F(
        "fused", "fused = log-probs from hidden states in chunks (no [B, T, V] logits); naive = from full "
        "logits; chunked_grad = from hidden states in whole-vocabulary-row token chunks, one recompute in "
        "the backward (none with a frozen LM head), no [B, T, V] logits either (for GPUs; unmeasured there).")
    share_prompt_prefix: bool = F(True, "Compute each prompt once per group: generation prefills it once "
                                  "and repeats its KV cache; log-prob passes run each distinct prompt once "
                                  "(same numbers, less work). Skipped automatically for models without a "
                                  "plain KV cache or with gradient checkpointing.")
    logprob_chunk_size: int | None = F(None, "Tokens per log-prob chunk; null = automatic.", ge=1, le=MAX_TOKENS)
    device: Literal["auto", "cpu", "cuda"] = F("auto", "auto = cuda when available.")
    parallel: Literal["ddp", "fsdp"] = F(
        "ddp", "Data parallelism when launched with torchrun (ignored in one process): ddp = every "
        "process holds the whole model, gradients all-reduced (gloo on the CPU, NCCL on GPUs); fsdp = "
        "FSDP2 shards parameters, gradients and optimizer state over the GPUs (CUDA only, no LoRA or "
        "critic yet). See docs/scaling.md.")
    num_threads: int | None = F(None, "torch CPU threads; null = torch's default.", ge=1)
    max_consecutive_skips: int = F(3, "Stop after this many optimizer steps in a row skipped for a "
                                   "non-finite loss or gradient norm, or this many steps in a row with no "
                                   "sample that has a valid reward.", ge=1)
    doctor_every: int = F(10, "Run the doctor's detectors (docs/stability.md) every N steps during training; a "
                          "detector that fires prints one line (counted in health/doctor_findings); 0 = off.", ge=0)
    halt_on: list[str] = F([], "Detectors that stop the run when they fire (state checkpointed first, exit "
                           "status 1), e.g. [entropy_collapse, mismatch]; [] = never halt. Needs doctor_every > 0.")
    doctor_thresholds: dict[str, float] = F({}, "The in-run detectors' thresholds changed from their defaults, "
                                            "e.g. {entropy_collapse_ratio: 0.2} (names: docs/stability.md).")
    trackers: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = F(
        [], "Extra trackers besides metrics.jsonl: tensorboard, wandb, mlflow, trackio (a list; "
        "one name is a list of one).")
    project: str | None = F(None, "Project name for wandb / mlflow / trackio.")
    run_name: str | None = F(None, "Run name for trackers; null = the output directory's name.")

    @field_validator("trackers", mode="before")
    @classmethod
    def _one_tracker(cls, value: Any) -> Any:
        # trainer.trackers=wandb (TRL's report_to=wandb) means the one-item list
        return [value] if isinstance(value, str) else value

    @field_validator("halt_on", mode="before")
    @classmethod
    def _one_detector(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("halt_on", "doctor_thresholds")
    @classmethod
    def _check_doctor(cls, value: Any, info: ValidationInfo) -> Any:
        # the names live with the detectors (pure Python, no torch)
        from ..doctor_checks import check_doctor_setting

        check_doctor_setting(info.field_name, value, doctor_every=info.data.get("doctor_every"))
        return value
