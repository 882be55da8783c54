"""What is not supported together: every such rule of a run in one table, each with its reason.

A rule is a function that returns the error of a combination it refuses, or None. It is
registered for the stage that can decide it:

* ``"load"``: the config alone decides (asynchronous rollouts with multi-turn episodes, dynamic
  sampling, vLLM or LoRA; GAE with LoRA; a grouped estimator with groups of one). Run by
  :func:`check_config` from the config's validator, so the config refuses to load (the message
  becomes a :class:`~steadyrl.errors.ConfigError` there);
* ``"placement"``: the device and the world size decide too (the data-parallel layout, LoRA with
  vLLM, asynchronous rollouts under torchrun or on a GPU). Run by :func:`check_parallel`, which
  :func:`steadyrl.assembly.setup.check_inputs` calls before any model weights load.

Rules run in the order they are written here; the first that refuses raises. A new limitation is
one decorated function below. No torch here: the config loads without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Literal

from ..errors import ConfigError

if TYPE_CHECKING:
    import torch

    from .schema import Config  # annotations only

Stage = Literal["load", "placement"]
RULES: list[tuple[Stage, Callable]] = []
"""``(stage, rule)`` in order: ``rule(config)`` for "load", ``rule(config, device_type, world)``
for "placement"; each returns the error message or None."""


def rule(stage: Stage):
    """Decorator: register a not-supported-together rule for ``stage``."""

    def wrap(fn):
        RULES.append((stage, fn))
        return fn

    return wrap


def check_config(config: Config) -> None:
    """The rules the config alone decides; raises ValueError (the config validator's error)."""
    for stage, fn in RULES:
        message = fn(config) if stage == "load" else None
        if message:
            raise ValueError(message)


def check_parallel(config: Config, device: torch.device, world: int) -> None:
    """The rules that need the device and the world size, before any model load; raises ConfigError."""
    for stage, fn in RULES:
        message = fn(config, device.type, world) if stage == "placement" else None
        if message:
            raise ConfigError(message)


# --- decided by the config alone ---------------------------------------------------------------

@rule("load")
def _critic_with_lora(config: Config) -> str | None:
    if config.algorithm.advantage_estimator == "gae" and config.model.lora.enabled:
        return ("algorithm.advantage_estimator 'gae' needs a critic, which is not "
                "supported with model.lora.enabled yet; use grpo/rloo or full fine-tuning")
    return None


@rule("load")
def _grouped_estimator_with_groups_of_one(config: Config) -> str | None:
    from .sections.algorithm import GROUPED_BY_ESTIMATOR

    estimator = config.algorithm.advantage_estimator
    if config.rollout.group_size >= 2 or not GROUPED_BY_ESTIMATOR[estimator]:
        return None
    per_sample = sorted(name for name, grouped in GROUPED_BY_ESTIMATOR.items() if not grouped)
    return (f"rollout.group_size = {config.rollout.group_size}: algorithm.advantage_estimator {estimator!r} "
            f"compares the responses to one prompt with each other and needs rollout.group_size >= 2 "
            f"(with one response every advantage is 0 and nothing is learned); raise group_size or "
            f"use an estimator that needs no group ({', '.join(per_sample)})")


@rule("load")
def _asynchronous_with(config: Config) -> str | None:
    """What asynchronous rollouts do not support (yet)."""
    staleness = config.rollout.asynchronous.max_staleness
    if staleness is None:
        return None
    refused = [
        (config.rollout.engine != "hf", f"rollout.engine = {config.rollout.engine!r} (the worker runs the hf "
         "engine; a vLLM engine as the rollout worker is not written yet)"),
        (config.rollout.multi_turn.enabled, "multi-turn episodes (rollout.multi_turn.tools / "
                                            "rollout.multi_turn.environment: the agent's "
         "tools and environments do not run in the rollout worker yet)"),
        (config.algorithm.dynamic_sampling, "algorithm.dynamic_sampling (its extra draws are decided after "
         "scoring, which the worker's queue of batches cannot wait for yet)"),
        (config.model.lora.enabled, "model.lora.enabled (the worker receives full weights only)"),
    ]
    for bad, what in refused:
        if bad:
            return (f"rollout.asynchronous.max_staleness = {staleness} cannot be combined with {what}; "
                    "set rollout.asynchronous.max_staleness=null")
    return None


@rule("load")
def _plain_low_precision_update_that_is_lost(config: Config) -> str | None:
    """Plain AdamW on bfloat16/float16 weights at an lr below half bf16's spacing at |w| = 0.02:
    most updates round away (docs/precision.md)."""
    from ..precision import LOST_UPDATE_LR

    m, optim = config.model, config.optim
    if m.dtype not in ("bfloat16", "float16") or m.bf16_update != "plain":
        return None
    lrs = [("optim.lr", optim.lr)]
    if config.algorithm.advantage_estimator == "gae":
        lrs.append(("optim.critic_lr", optim.critic_lr))
    for key, lr in lrs:
        if lr < LOST_UPDATE_LR:
            return (f"model.dtype = {m.dtype!r} with model.bf16_update = 'plain' and {key} = {lr:g}: plain AdamW "
                    f"loses every update below half the weight's spacing ({LOST_UPDATE_LR:.2g} at |w| = 0.02), "
                    "so most weights would never move. Use model.dtype=auto (float32 weights, bfloat16 compute "
                    "on a GPU) or model.bf16_update=kahan (docs/precision.md)")
    return None


@rule("load")
def _gdpo_with_a_teacher(config: Config) -> str | None:
    """GDPO builds the advantage from the reward functions' scores alone: the teacher's per-token
    reward (mixed distillation) would be paid for and dropped, as kl_mode = reward would be."""
    if config.algorithm.reward_aggregation != "normalize_then_sum" or config.teacher.name_or_path is None:
        return None
    if not config.teacher.task_rewards:
        return None  # pure distillation: the task's rewards do not enter, so there is nothing to aggregate
    return ("algorithm.reward_aggregation = normalize_then_sum (GDPO) with teacher.name_or_path = "
            f"{config.teacher.name_or_path!r} and teacher.task_rewards = true: GDPO's advantage is the reward "
            "functions' normalised scores only, so the teacher's per-token reward would never reach it. Set "
            "algorithm.reward_aggregation = sum, or teacher.task_rewards = false (pure distillation)")


# --- decided with the device and the world size -------------------------------------------------

@rule("placement")
def _fsdp_with(config: Config, device: str, world: int) -> str | None:
    if config.trainer.parallel != "fsdp":
        return None
    if device != "cuda":
        return (f"trainer.parallel = 'fsdp' needs CUDA GPUs (trainer.device resolves to "
                f"{device!r}); use trainer.parallel=ddp, which runs on the CPU with gloo")
    if config.model.lora.enabled:
        return ("trainer.parallel = 'fsdp' with model.lora.enabled is not supported yet; "
                "use trainer.parallel=ddp (LoRA weights are small)")
    if config.rollout.dtype is not None and config.rollout.engine == "hf":
        return (f"trainer.parallel = 'fsdp' with rollout.dtype = {config.rollout.dtype!r} is not supported "
                "(the HF engine's copy of a sharded policy); leave rollout.dtype null")
    if config.model.dtype in ("bfloat16", "float16") and config.model.bf16_update != "plain":
        return (f"trainer.parallel = 'fsdp' with model.dtype = {config.model.dtype!r} and model.bf16_update = "
                f"{config.model.bf16_update!r} is not supported yet (the compensated update of sharded "
                "weights); use model.dtype=auto (float32 weights, bfloat16 compute) or trainer.parallel=ddp")
    if config.algorithm.advantage_estimator == "gae":
        return ("trainer.parallel = 'fsdp' with a critic (algorithm.advantage_estimator = 'gae') "
                "is not supported yet; use trainer.parallel=ddp or a critic-free estimator")
    return None


@rule("placement")
def _vllm_with_lora(config: Config, device: str, world: int) -> str | None:
    if config.rollout.engine == "vllm" and config.model.lora.enabled:
        return "rollout.engine = 'vllm' with model.lora.enabled is not supported yet; use rollout.engine=hf"
    return None


@rule("placement")
def _asynchronous_placed(config: Config, device: str, world: int) -> str | None:
    if config.rollout.asynchronous.max_staleness is None:
        return None
    if world > 1:
        return ("rollout.asynchronous.max_staleness is set under torchrun: asynchronous "
                "rollouts run on one process (a rollout worker per rank is not written yet); "
                "set rollout.asynchronous.max_staleness=null")
    if device != "cpu":
        return (f"rollout.asynchronous.max_staleness is set with trainer.device on {device}: "
                "the rollout worker is written for the CPU only (on GPUs it would be a separate GPU "
                "or a vLLM engine, docs/scaling.md); set rollout.asynchronous.max_staleness=null")
    return None


@rule("placement")
def _batches_over_ranks(config: Config, device: str, world: int) -> str | None:
    if world == 1:
        return None
    per_step, mini = config.rollout.prompts_per_step, config.trainer.mini_batch_size
    if per_step % world:
        return (f"rollout.prompts_per_step = {per_step} cannot be split over {world} "
                f"processes: it must be a multiple of the world size (e.g. {-(-per_step // world) * world})")
    if mini is not None and mini % world:
        return (f"trainer.mini_batch_size = {mini} cannot be split over {world} "
                "processes: it counts samples over all ranks and must be a multiple of the world size")
    return None


def _register() -> None:
    """Hand :func:`check_config` to the config's validator (:data:`steadyrl.config.schema.LOAD_RULES`):
    the schema runs the rules without importing the module that writes them."""
    from .schema import LOAD_RULES

    if check_config not in LOAD_RULES:
        LOAD_RULES.append(check_config)


_register()
