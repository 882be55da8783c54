"""The policy (and critic) update of one training step, visible in one place.

For each of ``ppo_epochs`` passes the batch is cut into mini-batches (one optimizer step each)
and those into micro-batches (one forward/backward each, gradients accumulated): ``micro_batch_size``
rows each, or rows packed by ``max_tokens_per_micro_batch`` (:mod:`.packing`). Per micro-batch::

    logp, entropy = policy(response tokens)
    loss = policy_loss(logp, old_logp, A)                    # ppo / gspo / cispo / vanilla_pg / sapo /
                                                             # kl_cov / clip_cov (.selection: tokens chosen
                                                             # per mini-batch over all ranks)
         + kl_coef * agg(KL(logp || ref_logp))               # kl_mode: loss
         - entropy_coef * agg(entropy)

Every ``agg`` divides by the token and sequence counts of the whole mini-batch, summed over all
data-parallel ranks (:func:`loss_denominators`, the one place they are computed), so the
gradient does not depend on how the mini-batch is split into micro-batches or ranks.

Data parallel (``policy`` wrapped by :func:`steadyrl.distributed.wrap_model`): each rank holds
its share of the batch, ``trainer.mini_batch_size`` counts samples over all ranks (each rank
takes ``mini_batch_size / world_size`` of its own per optimizer step), gradients are
accumulated without communication (``no_sync``) until a mini-batch's last micro-batch, whose
backward all-reduces them. DDP (and FSDP) average over ranks; each rank's loss is its part of
the global sum (local numerators over global denominators), so multiplying it by
``world_size`` makes the synchronised gradient the gradient of the global loss — the one a
single process computes on the whole batch. Metrics are reduced over ranks in
:meth:`steadyrl.metrics.Metrics.result` (the one accumulator: each metric's
reduction declared where it is recorded); the skip decision uses the global loss and the (already global)
gradient norm, so every rank steps or skips together.

``actor/update_ratio`` / ``actor/params_changed_frac`` (and the critic's): how far the step's
optimizer steps moved a fixed sample of the trained weights (:class:`~.optim.UpdateProbe`).

Before the optimizer touches anything the gradient norm is clipped to ``max_grad_norm``; a
non-finite loss or gradient norm, of the policy or of the critic, skips the step for both
(gradients dropped, parameters and optimizer states untouched) and is counted.
"""

from __future__ import annotations

import math

import torch

from .. import distributed as dist
from ..config.schema import Config
from ..functional import (
    POLICY_LOSS_METRIC_REDUCTIONS,
    POLICY_LOSS_OPTIONS,
    POLICY_LOSS_SELECTIONS,
    POLICY_LOSSES,
    aggregate_loss,
    kl_penalty,
    masked_mean,
    value_loss,
)
from ..metrics import Metrics
from .batch import TrainBatch
from .forward import critic_values, response_logprobs
from .optim import UpdateProbe
from .packing import micro_batch_plan, trim
from .selection import needs_selection_inputs, select_tokens, selection_metrics

KL_METRIC_ESTIMATORS = ("k1", "k2", "k3", "abs")


def loss_denominators(loss_mask: torch.Tensor) -> tuple[float, float]:
    """Valid tokens and sequences of a mini-batch, summed over all data-parallel ranks."""
    tokens = dist.all_reduce_sum(loss_mask.sum())
    seqs = dist.all_reduce_sum((loss_mask.sum(-1) > 0).sum())
    return tokens, seqs


def _is_finite(x) -> bool:
    return math.isfinite(float(x))


def _policy_micro_step(policy, m: TrainBatch, config: Config, agg: dict, kl_coef: float,
                       metrics: Metrics, first_epoch: bool) -> torch.Tensor:
    algo, trainer = config.algorithm, config.trainer
    logp, entropy = response_logprobs(policy, m, temperature=config.rollout.temperature,
                                      impl=trainer.logprob_impl, chunk_size=trainer.logprob_chunk_size,
                                      share_prefix=trainer.share_prompt_prefix,
                                      padding_free=trainer.padding_free, with_entropy=True)
    old = m.old_logprobs if m.old_logprobs is not None else logp.detach()
    loss_fn = POLICY_LOSSES[algo.policy_loss]
    options = {name: getattr(algo, name) for name in POLICY_LOSS_OPTIONS[algo.policy_loss]}  # declared by the loss
    if algo.policy_loss in POLICY_LOSS_SELECTIONS:
        options["selected"] = m.selected
    if m.token_weights is not None:
        options["token_weights"] = m.token_weights
    loss, pg = loss_fn(logp, old, m.advantages, m.loss_mask, clip_low=algo.clip_low,
                       clip_high=algo.clip_high, dual_clip=algo.dual_clip_value,
                       loss_agg_mode=algo.loss_agg_mode, sample_weights=m.sample_weights, **options, **agg)
    tokens = float(m.loss_mask.sum())
    metrics.total("actor/pg_loss", loss.detach())
    for name, value in pg.items():
        key = "actor/pg_" + name if name.startswith("clipfrac") else "actor/" + name
        reduce = POLICY_LOSS_METRIC_REDUCTIONS.get(name, "mean")  # declared by the loss, where it is made
        if reduce == "mean" or tokens > 0:  # an extreme of no token is no value
            metrics.record(key, value, reduce, weight=tokens)
    metrics.mean("actor/entropy", masked_mean(entropy.detach(), m.loss_mask), tokens)
    if m.ref_logprobs is not None:
        if algo.kl_mode == "loss":
            kl = kl_penalty(logp, m.ref_logprobs, algo.kl_estimator)
            kl_loss = aggregate_loss(kl, m.loss_mask, algo.loss_agg_mode, sample_weights=m.sample_weights, **agg)
            loss = loss + kl_coef * kl_loss
            metrics.total("actor/kl_loss", kl_loss.detach())
        if first_epoch:
            for est in KL_METRIC_ESTIMATORS:
                value = masked_mean(kl_penalty(logp.detach(), m.ref_logprobs, est), m.policy_mask)
                metrics.mean(f"kl/{est}", value, float(m.policy_mask.sum()))
    if algo.entropy_coef > 0:
        ent_loss = aggregate_loss(entropy, m.loss_mask, algo.loss_agg_mode, sample_weights=m.sample_weights, **agg)
        loss = loss - algo.entropy_coef * ent_loss
    return loss


def _critic_micro_step(critic, m: TrainBatch, config: Config, agg: dict, metrics: Metrics) -> torch.Tensor:
    values = critic_values(critic, m)
    loss, vm = value_loss(values, m.values, m.returns, m.loss_mask, clip_range=config.algorithm.value_clip,
                          loss_agg_mode="token-mean", global_tokens=agg["global_tokens"])
    tokens = float(m.loss_mask.sum())
    metrics.total("critic/value_loss", loss.detach())
    metrics.mean("critic/vf_clipfrac", vm["vf_clipfrac"], tokens)
    return loss


def _clip(params, max_grad_norm: float, loss_total: float) -> tuple[float, bool]:
    """Clip the gradients -> ``(norm before clipping, loss and norm both finite)``."""
    norm = dist.grad_norm_value(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    return norm, _is_finite(norm) and _is_finite(loss_total)


def _step_or_drop(optimizers, ok: bool) -> None:
    """Step every optimizer, or none (a non-finite policy *or* critic loss drops all gradients)."""
    for optimizer in optimizers:
        if ok:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def _gradient_scale(policy, critic) -> int:
    """``world_size`` when the models are data-parallel wrappers (they average gradients over
    ranks), 1 in a single process. An unwrapped model in a multi-process run would train on its
    own rank's data only: refused."""
    n = dist.world_size()
    if n == 1:
        return 1
    for model in (policy, critic):
        if model is not None and not (dist.is_ddp(model) or dist.is_fsdp(model)):
            raise ValueError(f"ppo_update in a run of {n} processes needs models wrapped by "
                             "steadyrl.distributed.wrap_model (DDP or FSDP); got a plain module")
    return n


def ppo_update(policy, optimizer, batch: TrainBatch, config: Config, *, kl_coef: float,
               critic=None, critic_optimizer=None, device: torch.device) -> tuple[dict[str, float], int, int]:
    """Run the update on ``batch`` (CPU tensors with advantages etc. filled in).

    Returns ``(metrics, optimizer_steps, skipped_steps)``.
    """
    trainer = config.trainer
    size = len(batch)
    mini_size = min(trainer.mini_batch_size // dist.world_size() if trainer.mini_batch_size else size, size)
    shuffle = trainer.ppo_epochs > 1 or mini_size < size
    scale = _gradient_scale(policy, critic)
    params = [p for p in policy.parameters() if p.requires_grad]
    critic_params = [p for p in critic.parameters() if p.requires_grad] if critic is not None else []
    metrics, skipped = Metrics(), 0
    probes = _probes(params, optimizer, critic_params, critic_optimizer)
    for epoch in range(trainer.ppo_epochs):
        order = torch.randperm(size) if shuffle else torch.arange(size)
        for start in range(0, size, mini_size):
            mini = batch.select(order[start : start + mini_size])
            tokens, seqs = loss_denominators(mini.loss_mask)
            if tokens == 0:  # every sample masked out (rewards, difficulty, truncation): no data, so
                metrics.empty_minibatches += 1  # no step (AdamW's momentum would still move weights)
                continue
            agg = {"global_tokens": tokens, "global_seqs": seqs,
                   "norm_length": config.algorithm.norm_length or config.rollout.max_new_tokens}
            if needs_selection_inputs(config.algorithm):  # decided over the whole mini-batch, every rank
                mini = select_tokens(mini, config.algorithm)
                for name, value in selection_metrics(mini).items():
                    metrics.mean(name, value, float(mini.loss_mask.sum()))  # this rank's share, pooled
            loss_total, critic_total = 0.0, 0.0
            micros = micro_batch_plan(mini, trainer.micro_batch_size, trainer.max_tokens_per_micro_batch,
                                      padding_free=trainer.padding_free)
            for i, (micro, trimmed) in enumerate(micros):
                m = mini.select(micro)
                m = (trim(m) if trimmed else m).to(device)
                accumulate = i < len(micros) - 1  # gradients are synchronised on the last one only
                with dist.no_sync(policy, accumulate):
                    loss = _policy_micro_step(policy, m, config, agg, kl_coef, metrics, epoch == 0)
                    (loss * scale).backward()
                loss_total += float(loss.detach())
                if critic is not None:
                    with dist.no_sync(critic, accumulate):
                        closs = _critic_micro_step(critic, m, config, agg, metrics)
                        (closs * scale).backward()
                    critic_total += float(closs.detach())
            loss_total = dist.all_reduce_sum(loss_total)  # global: every rank decides the same
            norm, ok = _clip(params, config.optim.max_grad_norm, loss_total)
            metrics.optimizer_steps += 1
            metrics.same("actor/grad_norm", norm)  # NaN/inf kept: it is what the user must see
            metrics.same("actor/loss", loss_total)
            if critic is not None:
                critic_total = dist.all_reduce_sum(critic_total)
                cnorm, critic_ok = _clip(critic_params, config.optim.max_grad_norm, critic_total)
                metrics.same("critic/grad_norm", cnorm)
                ok = ok and critic_ok  # a critic that cannot learn is counted, not skipped silently
            _step_or_drop([optimizer, critic_optimizer] if critic is not None else [optimizer], ok)
            skipped += not ok
    for role, probe in probes.items():
        for name, value in probe.metrics().items():
            metrics.mean(name.replace("actor/", role + "/"), value, 1.0)  # pooled over ranks (FSDP shards)
    return metrics.result(), metrics.optimizer_steps, skipped


def _optimized(params, optimizer) -> list:
    """The tensors the optimizer updates: its own parameter list (under FSDP2 the sharded DTensors;
    the module's ``parameters()`` may be unsharded views whose storage is freed after the step),
    or ``params`` for an optimizer without one."""
    groups = getattr(optimizer, "param_groups", None)
    return [p for g in groups for p in g["params"] if p.requires_grad] if groups else list(params)


def _probes(params, optimizer, critic_params, critic_optimizer) -> dict[str, UpdateProbe]:
    """A fixed sample of the trained weights of the policy (and critic), read before the update:
    ``actor/update_ratio``, ``actor/params_changed_frac`` (and ``critic/...``) after it."""
    probes = {"actor": UpdateProbe(_optimized(params, optimizer), optimizer)}
    if critic_optimizer is not None:
        probes["critic"] = UpdateProbe(_optimized(critic_params, critic_optimizer), critic_optimizer)
    return probes
