"""A run's state into a checkpoint and back: weights, optimizer, schedule, RNG streams, counters.

:func:`save` writes what every rank holds together (every rank's RNG state and, under FSDP, the full
weights and optimizer state: a collective, every rank calls it) into one checkpoint that rank 0
writes; :func:`restore` loads it into a freshly built run. The counters are :class:`RunState`; the
sampler's position, the running reward statistics, the KL controller and the asynchronous
rollouts' batches in flight come with them, so a resumed run replays the uninterrupted one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .. import distributed as dist
from ..assembly.setup import RunState, seed_everything
from . import checkpoint as ckpt

if TYPE_CHECKING:
    from ..trainer.parts import Run


def _checkpoint_state(run: Run, shared: dict) -> dict:
    state = dict(vars(run.state))
    state.update({
        "optimizer": shared["optimizer"],
        "critic_optimizer": run.optim.critic_optimizer.state_dict() if run.optim.critic_optimizer else None,
        "scheduler": run.optim.scheduler.state_dict(),
        "rng": shared["rng_ranks"][0],
        "rng_ranks": shared["rng_ranks"],  # every rank's, in rank order
        "running": run.optim.running.state_dict(),
        "kl_controller": run.optim.kl_controller.state_dict(),
        "sampler": run.task.sampler.state_dict(),
        # the batches in flight, completed, and the rollout worker's RNG (rollout.asynchronous)
        "asynchronous": run.rollouts.state_dict() if run.rollouts is not None else None,
    })
    return state


def _gathered_state(run: Run) -> dict:
    """What only all ranks together hold (a collective: every rank calls it): every rank's RNG
    state and, under FSDP, the full weights and optimizer state."""
    return {"rng_ranks": dist.gather_objects(ckpt.rng_state()),
            "policy": dist.full_model_state_dict(run.models.policy),
            "optimizer": dist.full_optimizer_state_dict(run.models.policy, run.optim.optimizer)}


def save(run: Run, step: int) -> Path | None:
    shared = _gathered_state(run)
    if not dist.is_main():
        dist.barrier()
        return None
    path = ckpt.save_checkpoint(run.output_dir / "checkpoints", step, policy=run.models.policy,
                                tokenizer=run.models.processor or run.models.tokenizer,  # a VLM's: its processor
                                state=_checkpoint_state(run, shared), critic=run.models.critic,
                                keep=run.config.trainer.keep_checkpoints, policy_state_dict=shared["policy"])
    dist.barrier()
    return path


def _restore_rng(run: Run, state: dict) -> None:
    """Each rank's own RNG state when the checkpoint has one for it (same world size: exact);
    otherwise rank 0's, re-seeded by rank and step on the other ranks (deterministic, but not
    the stream an uninterrupted run at that world size would have drawn)."""
    ranks = state.get("rng_ranks") or [state["rng"]]
    if dist.rank() < len(ranks):
        ckpt.set_rng_state(ranks[dist.rank()])
    else:
        ckpt.set_rng_state(ranks[0])
        seed_everything(run.config.trainer.seed + dist.rank() + 1_000_003 * run.state.step)


def restore(run: Run, path: Path) -> dict:
    """Load checkpoint ``path`` into the freshly built ``run``; returns its state."""
    state = ckpt.load_state(path)
    if dist.is_fsdp(run.models.policy):
        dist.load_full_model_state_dict(run.models.policy, ckpt.read_model_weights(path / "policy"))
    else:
        ckpt.load_model_weights(run.models.policy, path / "policy")
    if run.models.critic is not None:
        ckpt.load_model_weights(run.models.critic.backbone, path / "critic")
        run.models.critic.value_head.load_state_dict(torch.load(path / "critic" / "value_head.pt", weights_only=True))
        run.optim.critic_optimizer.load_state_dict(state["critic_optimizer"])
    dist.load_full_optimizer_state_dict(run.models.policy, run.optim.optimizer, state["optimizer"])
    run.optim.scheduler.load_state_dict(state["scheduler"])
    _apply_optim_config(run)
    run.optim.running.load_state_dict(state["running"])
    run.optim.kl_controller.load_state_dict(state["kl_controller"])
    run.task.sampler.load_state_dict(state["sampler"])
    run.state = RunState(**{k: state[k] for k in vars(RunState()) if k in state})
    _restore_rng(run, state)
    return state


def _apply_optim_config(run: Run) -> None:
    """The config's optimizer settings win over the checkpoint's: ``--resume optim.lr=...`` (the
    way out of a halted run) was silently overridden by the saved learning rate. Only the
    schedule's position (its step count) and the moment estimates come from the checkpoint;
    with an unchanged config this sets the same values the checkpoint held."""
    optim, scheduler = run.config.optim, run.optim.scheduler
    for optimizer, lr in ((run.optim.optimizer, optim.lr), (run.optim.critic_optimizer, optim.critic_lr)):
        for group in optimizer.param_groups if optimizer is not None else []:
            group.update(lr=lr, initial_lr=lr, betas=tuple(optim.betas), eps=optim.eps,
                         weight_decay=optim.weight_decay)
    scheduler.base_lrs = [optim.lr] * len(run.optim.optimizer.param_groups)
    for group, factor in zip(run.optim.optimizer.param_groups, scheduler.lr_lambdas):
        group["lr"] = optim.lr * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in run.optim.optimizer.param_groups]
