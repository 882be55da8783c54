"""Builders that turn a validated config into the pieces of a run.

Order matters for the user: everything that can be wrong with their input — data files,
columns, reward functions, model paths, the data-parallel layout — is checked before any model
weights are loaded, so a typo costs seconds, not a model load.

Under ``torchrun`` every rank builds the same run (same seed, same models; DDP broadcasts rank
0's parameters once), wraps the models for data parallelism (:func:`parallelize`), and then
re-seeds its RNGs with ``seed + rank`` so that the ranks sample different responses.
"""

from __future__ import annotations

import copy
import math
import random
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch

from .. import distributed as dist
from ..config.schema import Config
from ..errors import ConfigError
from ..functional import AdaptiveKLController, FixedKLController, RunningMoments
from ..models import (
    ValueModel,
    apply_lora,
    check_model_source,
    freeze_vision,
    load_policy,
    resolve_device,
    resolve_dtype,
    resolve_precision,
)
from .agent import build_agent
from ..trainer.packing import check_padding_free
from ..data.prompts import prepare_prompts
from .sources import data_folder, make_sampler, tokenize_parts
from .prompts import (
    Prompts,
    build_processor,
    build_tokenizer,
    check_context_length,
    image_options,
    named_template_errors,
    prompt_options,
    report_skipped,
    with_images,
)
from ..config.compat import check_parallel
from .inputs import Inputs, Task  # noqa: F401 - re-exported
from .task import NOTHING_TO_EVALUATE, task_inputs, task_of
from ..trainer.parts import Run, RunModels, RunOptim, RunState, RunTask  # noqa: F401 - re-exported
from .teacher import check_teacher_tokenizer, load_teacher, teacher_device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def total_steps(trainer_config, num_prompts: int, prompts_per_step: int) -> int:
    """``trainer.max_steps``, or fewer when ``trainer.max_epochs`` passes over the prompts end first."""
    if trainer_config.max_epochs is None:
        return trainer_config.max_steps
    by_epochs = math.ceil(trainer_config.max_epochs * num_prompts / prompts_per_step)
    return max(1, min(trainer_config.max_steps, by_epochs))


def lr_lambda(optim_config, max_steps: int):
    """Linear warm-up, then constant / linear / cosine decay to ``min_lr_ratio``."""
    warmup, floor, kind = optim_config.warmup_steps, optim_config.min_lr_ratio, optim_config.schedule

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
        shape = 1.0 - progress if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return floor + (1.0 - floor) * shape

    return factor


def build_models(config: Config, model_path: str, device: torch.device, plan=None):
    """``(policy, reference, critic, uses_adapter_reference)``, stored and computed as ``plan`` (a
    :class:`~steadyrl.precision.PrecisionPlan`; default: ``model.dtype`` on ``device``) says:
    float32 weights computing under bfloat16 autocast for ``model.dtype: auto`` on a GPU."""
    from ..precision import use_autocast

    m = config.model
    plan = plan or resolve_precision(m, device, config.rollout.dtype)
    dtype = getattr(torch, plan.stored)
    policy = load_policy(model_path, dtype=dtype, device=device, revision=m.revision,
                         trust_remote_code=m.trust_remote_code, attn_implementation=m.attn_implementation)
    use_autocast(policy, plan, device.type)  # before the reference copy and LoRA: both inherit it
    if m.freeze_vision:  # a VLM's vision tower and projector stay as they are (a text model: nothing)
        freeze_vision(policy)
    if m.gradient_checkpointing:
        # non-reentrant: the reentrant variant (transformers 4's default) breaks DDP's gradient hooks
        if hasattr(policy, "activation_checkpointing_enable"):  # transformers 5's name (the old one warns)
            policy.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        policy.config.use_cache = False
    needs_reference = config.algorithm.kl_mode != "none" and config.algorithm.kl_coef > 0
    reference, adapter_reference = None, False
    if m.lora.enabled:
        policy = apply_lora(policy, m.lora)
        adapter_reference = needs_reference
    elif needs_reference:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    if config.trainer.padding_free:
        check_padding_free(policy)
    critic = None
    if config.algorithm.advantage_estimator == "gae":
        critic = ValueModel.from_pretrained(m.critic_name_or_path or model_path, dtype=dtype, device=device,
                                            trust_remote_code=m.trust_remote_code)
        use_autocast(critic, plan, device.type)
    return policy, reference, critic, adapter_reference


def parallelize(config: Config, policy, reference, critic, device: torch.device):
    """``(train_policy, train_critic, reference, generator)``: the models wrapped for data
    parallelism (``trainer.parallel``), or as they are in a single process.

    What is wrapped is :class:`~steadyrl.trainer.forward.PolicyLogprobs` — the whole log-prob
    computation as one forward — so gradient synchronisation (DDP) and parameter gathering
    (FSDP) see every parameter the fused path touches. Under FSDP the frozen reference is
    sharded too, and generation goes through :class:`~steadyrl.distributed.FSDPGenerator`.
    """
    from ..trainer.forward import PolicyLogprobs

    kind = config.trainer.parallel
    train_policy = dist.wrap_model(PolicyLogprobs(policy), kind, device, layers_of=policy)
    train_critic = dist.wrap_model(critic, kind, device, layers_of=critic) if critic is not None else None
    generator = policy
    if kind == "fsdp" and dist.world_size() > 1:
        if reference is not None:
            reference = dist.wrap_model(PolicyLogprobs(reference), kind, device, layers_of=reference)
        generator = dist.FSDPGenerator(train_policy, policy)
    return train_policy, train_critic, reference, generator


def build_optimizer(params, optim_config, lr: float, bf16_update: str = "plain") -> torch.optim.Optimizer:
    """AdamW; for bfloat16/float16 weights with ``model.bf16_update`` other than ``plain``, the
    variant of :class:`~steadyrl.trainer.optim.LowPrecisionAdamW` that keeps small updates."""
    params = [p for p in params if p.requires_grad]
    kwargs = {"lr": lr, "betas": optim_config.betas, "eps": optim_config.eps,
              "weight_decay": optim_config.weight_decay}
    low = any(p.dtype in (torch.bfloat16, torch.float16) for p in params)
    if low and bf16_update != "plain":
        from ..trainer.optim import LowPrecisionAdamW

        return LowPrecisionAdamW(params, variant=bf16_update, **kwargs)
    return torch.optim.AdamW(params, **kwargs)


def check_inputs(config: Config, resources: ExitStack) -> Inputs:
    """Every input of a run checked — layout, engine, trackers, data, rewards, model paths,
    prompt lengths against the model's context — before anything in the run directory is
    touched or any model weights are loaded. ``resources`` owns the reward scorer's workers and
    the agent's, from the moment they exist (also when a check fails)."""
    from ..rollout import check_engine_available, check_rollout_dtype
    from ..tracking import check_backends_available

    trainer = config.trainer
    if trainer.num_threads:
        torch.set_num_threads(trainer.num_threads)
    device = dist.device_for_rank(resolve_device(trainer.device))
    resolve_dtype(config.model.dtype, device)
    check_parallel(config, device, dist.world_size())
    check_engine_available(config.rollout.engine)
    check_rollout_dtype(config.rollout.dtype, device)
    check_backends_available(trainer.trackers)
    if config.rollout.multi_turn.agent is not None:  # its signature, before any model (the demo's is built next)
        from ..gateway import load_agent

        load_agent(config.rollout.multi_turn.agent)
    train_records, eval_records, scorer, (train_parts, eval_parts) = task_inputs(config)
    resources.callback(scorer.close)
    inputs = Inputs(device=device, train_records=train_records, eval_records=eval_records, scorer=scorer,
                    train_parts=train_parts, eval_parts=eval_parts, task=task_of(config), resources=resources)
    inputs.prompts = _owned(inputs.task.check_model(config, inputs), resources)  # the demo's: None, built later
    teacher_device(config, device)  # teacher.device names a device that exists
    if inputs.prompts is not None:  # a user's model: its vocabulary against the teacher's, before any weights load
        check_teacher_tokenizer(config, inputs.prompts.tokenizer, inputs.prompts.model_path)
    return inputs


def _owned(prompts: Prompts | None, resources: ExitStack) -> Prompts | None:
    """``prompts``, its agent's workers now owned by ``resources`` (shut down when it closes)."""
    if prompts is not None and prompts.agent is not None:
        resources.callback(prompts.agent.shutdown)
    return prompts


def build_run(config: Config, output_dir: Path, inputs: Inputs | None = None) -> Run:
    """Everything a run needs, from the inputs :func:`check_inputs` checked (checked here when
    not given: then nothing closes the scorer's workers, which is for tests and notebooks). The
    task's model is resolved here (the demo's: built and warm-started in ``output_dir/warmstart``)."""
    inputs = check_inputs(config, ExitStack()) if inputs is None else inputs
    trainer = config.trainer
    seed_everything(trainer.seed)
    device, scorer = inputs.device, inputs.scorer
    tokenizer_checked = inputs.prompts is not None  # a user's: compared with the teacher's in check_inputs
    prompts = inputs.task.model(config, output_dir, inputs)  # the demo's: built in output_dir/warmstart
    if prompts is not inputs.prompts:
        _owned(prompts, inputs.resources)
    model_path = prompts.model_path
    if not tokenizer_checked:  # the demo's: once it is built
        check_teacher_tokenizer(config, prompts.tokenizer, model_path)
    policy, reference, critic, adapter_ref = build_models(config, model_path, device)
    train_policy, train_critic, reference, generator = parallelize(config, policy, reference, critic, device)
    train_prompts = prompts.train_prompts
    update = config.model.bf16_update
    optimizer = build_optimizer(policy.parameters(), config.optim, config.optim.lr, update)
    critic_optimizer = (build_optimizer(critic.parameters(), config.optim, config.optim.critic_lr, update)
                        if critic else None)
    total = total_steps(trainer, len(train_prompts), config.rollout.prompts_per_step)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config.optim, total))
    algo = config.algorithm
    kl = (AdaptiveKLController(algo.kl_coef, algo.kl_target, algo.kl_horizon) if algo.kl_target
          else FixedKLController(algo.kl_coef))
    sampler = make_sampler(config, train_prompts, prompts.train_parts)
    teacher = load_teacher(config, device, vision_policy=prompts.processor is not None)
    models = RunModels(tokenizer=prompts.tokenizer, policy=policy, reference=reference, critic=critic,
                       train_policy=train_policy, train_critic=train_critic, generator=generator,
                       uses_adapter_reference=adapter_ref, teacher=teacher, processor=prompts.processor)
    task = RunTask(scorer=scorer, train_prompts=train_prompts, eval_prompts=prompts.eval_prompts, sampler=sampler,
                   agent=prompts.agent, eval_sets=prompts.eval_sets, processor=prompts.processor)
    optim = RunOptim(optimizer=optimizer, critic_optimizer=critic_optimizer, scheduler=scheduler,
                     kl_controller=kl, running=RunningMoments())
    run = Run(config=config, output_dir=output_dir, device=device, models=models, task=task, optim=optim,
              total_steps=total)
    task.show = inputs.task.show(config, run)
    run.state.dropped_prompts = prompts.dropped
    if prompts.dropped and dist.is_main():
        print(f"data: dropped {prompts.dropped} of {len(inputs.train_records)} training prompts longer than "
              f"data.max_prompt_tokens = {config.data.max_prompt_tokens} tokens", flush=True)
    if dist.world_size() > 1:  # the ranks sample different responses (resume restores each rank's RNG)
        seed_everything(trainer.seed + dist.rank())
    return run


def build_eval(config: Config, model_path: str, resources: ExitStack, *, of_run_dir: bool = False):
    """``(engine, scorer, held-out prompts, device, episode driver)`` to evaluate ``model_path`` alone (a
    run directory's checkpoint with ``of_run_dir``); the prompts are a dict of named sets with
    ``data.eval_sources``. ``resources`` owns the scorer's and the agent's workers."""
    from ..rollout import build_engine, check_engine_available
    from ..rollout.driver import episode_driver

    task_of(config).check_eval(config, model_path, of_run_dir)
    check_engine_available(config.rollout.engine)
    _, evals, scorer, (_, eval_parts) = task_inputs(config, for_eval=True)
    resources.callback(scorer.close)
    if not evals:
        raise ConfigError(NOTHING_TO_EVALUATE)
    if config.trainer.num_threads:
        torch.set_num_threads(config.trainer.num_threads)
    device = resolve_device(config.trainer.device)
    m = config.model
    dtype = resolve_dtype(m.dtype, device)
    check_model_source("model.name_or_path", model_path)
    tokenizer = build_tokenizer(config, model_path)
    processor = build_processor(config, model_path, train=False)
    with named_template_errors(config):
        agent = build_agent(config, tokenizer, processor)
        if agent is not None:
            resources.callback(agent.shutdown)
        images = image_options(config, evals, processor, model_path, data_folder(config.data.eval_path), strict=False,
                               source="data.eval_path")
        options = with_images(prompt_options(config, agent), processor, images)
        if eval_parts is None:
            prompts, _ = prepare_prompts(evals, tokenizer, options, source="data.eval_path")
        else:  # data.eval_sources: a dict of held-out sets, each evaluated on its own
            prompts = {p.name: p.records for p in tokenize_parts(eval_parts, "data.eval_sources", tokenizer,
                                                                 options)[0]}
        report_skipped([images])
    flat = prompts if eval_parts is None else [q for ps in prompts.values() for q in ps]
    check_context_length(config, model_path, [], flat)
    policy = load_policy(model_path, dtype=dtype, device=device, revision=m.revision,
                         trust_remote_code=m.trust_remote_code, attn_implementation=m.attn_implementation)
    engine = build_engine(config.rollout.engine, policy, tokenizer, config.rollout,
                          share_prefix=config.trainer.share_prompt_prefix)
    return engine, scorer, prompts, device, episode_driver(agent, processor)
