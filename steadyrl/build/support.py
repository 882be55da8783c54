"""What is not supported together, once the device and the world size are known.

The combinations a config rules out by itself (asynchronous rollouts with multi-turn episodes,
dynamic sampling, vLLM or LoRA; GAE with LoRA; a grouped estimator with groups of one) are refused
when it loads, in :mod:`steadyrl.config.schema`; the ones that depend on where the run runs are
here, in :func:`check_parallel`, called by :func:`steadyrl.build.setup.check_inputs` before any
model weights load.
"""

from __future__ import annotations

import torch

from ..config.schema import Config
from ..errors import ConfigError


def check_parallel(config: Config, device: torch.device, world: int) -> None:
    """What cannot work together on this device and world size, refused before any model load:
    the data-parallel layout (FSDP's needs, batch sizes that do not split over the ranks), LoRA with
    vLLM, asynchronous rollouts under torchrun or on a GPU. What the config alone rules out is
    refused when it loads (:mod:`steadyrl.config.schema`: ``_check_asynchronous`` and ``Config._check``)."""
    t, ro = config.trainer, config.rollout
    if t.parallel == "fsdp":
        if device.type != "cuda":
            raise ConfigError(f"trainer.parallel = 'fsdp' needs CUDA GPUs (trainer.device resolves to "
                              f"{device.type!r}); use trainer.parallel=ddp, which runs on the CPU with gloo")
        if config.model.lora.enabled:
            raise ConfigError("trainer.parallel = 'fsdp' with model.lora.enabled is not supported yet; "
                              "use trainer.parallel=ddp (LoRA weights are small)")
        if ro.dtype is not None and ro.engine == "hf":
            raise ConfigError(f"trainer.parallel = 'fsdp' with rollout.dtype = {ro.dtype!r} is not supported "
                              "(the HF engine's copy of a sharded policy); leave rollout.dtype null")
        if config.algorithm.advantage_estimator == "gae":
            raise ConfigError("trainer.parallel = 'fsdp' with a critic (algorithm.advantage_estimator = 'gae') "
                              "is not supported yet; use trainer.parallel=ddp or a critic-free estimator")
    if ro.engine == "vllm" and config.model.lora.enabled:
        raise ConfigError("rollout.engine = 'vllm' with model.lora.enabled is not supported yet; "
                          "use rollout.engine=hf")
    staleness = config.rollout.asynchronous.max_staleness
    if staleness is not None and world > 1:
        raise ConfigError("rollout.asynchronous.max_staleness is set under torchrun: asynchronous "
                          "rollouts run on one process (a rollout worker per rank is not written yet); "
                          "set rollout.asynchronous.max_staleness=null")
    if staleness is not None and device.type != "cpu":
        raise ConfigError(f"rollout.asynchronous.max_staleness is set with trainer.device on {device.type}: "
                          "the rollout worker is written for the CPU only (on GPUs it would be a separate GPU "
                          "or a vLLM engine, docs/scaling.md); set rollout.asynchronous.max_staleness=null")
    if world == 1:
        return
    if ro.prompts_per_step % world:
        raise ConfigError(f"rollout.prompts_per_step = {ro.prompts_per_step} cannot be split over {world} "
                          f"processes: it must be a multiple of the world size (e.g. "
                          f"{-(-ro.prompts_per_step // world) * world})")
    if t.mini_batch_size is not None and t.mini_batch_size % world:
        raise ConfigError(f"trainer.mini_batch_size = {t.mini_batch_size} cannot be split over {world} "
                          "processes: it counts samples over all ranks and must be a multiple of the world size")
