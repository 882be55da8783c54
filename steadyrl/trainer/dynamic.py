"""A step's samples: one draw of prompts, or several with dynamic sampling (DAPO's filter groups).

A *draw* takes the next ``rollout.prompts_per_step`` prompts from the sampler (this rank's share),
rolls out ``group_size`` episodes of each and scores them. Without dynamic sampling a step is one
draw. With ``algorithm.dynamic_sampling`` a group that carries no signal is filtered out and more
prompts are drawn until the step has ``prompts_per_step`` informative groups, at most
``algorithm.dynamic_sampling_max_draws`` draws per step:

* ``equal_scores`` (the default filter): a group whose valid scores are all equal (or that has
  fewer than two valid scores) has every GRPO advantage 0; equal means ``max == min``, exactly;
* ``difficulty``: seed 001's thresholds as a filter: a group is kept when
  ``difficulty_low < mean score < difficulty_high``, the difficulty mask's own rule (the exact
  mean; a group of one is kept).

Kept groups fill the step in the order they were drawn. When the draws run out first, the step is
filled with filtered groups of the first draw that stay out of the loss and of reward processing
(``selected`` False; ``batch/zero_std_group_frac`` counts them as the zero-std groups they are):
the step trains on what there is, and ``dynamic/short_groups`` says how many were missing. They
are samples of the step all the same: ``reward/*``, ``response/length_*`` and the episode counts of
``rollout/*`` include them. Every rank draws the same prompts in the same number of draws (the
sampler stays in step on all ranks), so the sampler's position and the RNG streams in a
checkpoint make a resumed run exact.

Metrics: ``dynamic/draws``, ``dynamic/refilled_frac`` (kept groups that came from extra draws),
``dynamic/filtered_groups/<filter>``, ``dynamic/short_groups``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .. import distributed as dist
from ..functional import difficulty_groups, group_scores_vary
from ..rollout.base import concat_generations
from ..rewards.scorer import score_episodes
from ..rollout.driver import Draw, episode_seeds, rollout
from .global_batch import merge_results


@dataclass
class StepSamples:
    prompts: list
    samples: list  # one PromptItem per row
    gen: object
    result: object
    selected: torch.Tensor | None  # [B] bool: rows that may train (None: all, no dynamic sampling)
    generate_s: float
    score_s: float
    metrics: dict


def draw_batch(run, engine, step: int, index: int) -> Draw:
    """Draw ``index`` of step ``step``: prompts, episodes and scores."""
    ro = run.config.rollout
    prompts = dist.shard(run.task.sampler.next_batch())  # whole prompts: a group never spans two ranks
    rows = len(prompts) * ro.group_size
    first_row = (index * dist.world_size() + dist.rank()) * rows  # the sample's global index
    seeds = episode_seeds(run.config.trainer.seed, step, first_row, rows)  # environments replay on resume
    t0 = time.perf_counter()
    gen = rollout(engine, run.models.tokenizer, run.task.driver, prompts, ro.group_size, ro, seeds=seeds,
                  temperature=ro.temperature, top_p=ro.top_p, top_k=ro.top_k)
    t1 = time.perf_counter()
    samples = [p for p in prompts for _ in range(ro.group_size)]
    result = score_episodes(run.task.scorer, samples, gen, environment=ro.multi_turn.environment is not None)
    return Draw(prompts, gen, result, t1 - t0, time.perf_counter() - t1)


def informative_groups(scores: torch.Tensor, valid: torch.Tensor, group_size: int, algo) -> torch.Tensor:
    """``[G]`` bool: the groups that carry a learning signal under ``algo.dynamic_sampling_filter``
    (scores compared exactly: the rules of :func:`~steadyrl.functional.group_scores_vary` and of
    the difficulty mask, :func:`~steadyrl.functional.difficulty_groups`)."""
    if algo.dynamic_sampling_filter == "difficulty":
        return difficulty_groups(scores, group_size, algo.difficulty_low, algo.difficulty_high, mask=valid.bool())
    return group_scores_vary(scores, group_size, mask=valid.bool())


def step_samples(run, engine, step: int) -> StepSamples:
    """This rank's samples of step ``step`` (one draw, or a dynamically filled step)."""
    if run.rollouts is not None:  # asynchronous rollouts (never with dynamic sampling: refused at load)
        first, metrics = run.rollouts.take(step)
    else:
        first, metrics = draw_batch(run, engine, step, 0), {}
    algo, n = run.config.algorithm, run.config.rollout.group_size
    samples = [p for p in first.prompts for _ in range(n)]
    if not algo.dynamic_sampling:
        return StepSamples(first.prompts, samples, first.gen, first.result, None, first.generate_s, first.score_s,
                           metrics)
    quota = len(first.prompts)
    draws, kept = [first], []  # kept: (draw index, group index)
    filtered = 0
    while True:
        d = draws[-1]
        keep = informative_groups(d.result.scores, d.result.valid, n, algo)
        filtered += int((~keep).sum())
        kept += [(len(draws) - 1, g) for g in torch.nonzero(keep).flatten().tolist()]
        short = max(quota - len(kept), 0)
        if len(draws) >= algo.dynamic_sampling_max_draws or dist.all_reduce_max(short) == 0:
            break
        if short:
            draws.append(draw_batch(run, engine, step, len(draws)))
        else:  # this rank is full: only keep its sampler in step with the others'
            run.task.sampler.next_batch()
            draws.append(Draw([], None, None, 0.0, 0.0))
    return _fill_step(run, draws, kept[:quota], quota, filtered)


def _fill_step(run, draws: list[Draw], kept: list[tuple[int, int]], quota: int, filtered: int) -> StepSamples:
    n = run.config.rollout.group_size
    real = [d for d in draws if d.gen is not None]
    fill = [(0, g) for g in range(quota) if (0, g) not in kept][: quota - len(kept)]  # signal-free, masked out
    groups = kept + fill
    offsets = {}
    start = 0
    for i, d in enumerate(draws):
        if d.gen is not None:
            offsets[i] = start
            start += len(d.prompts)
    rows = [(offsets[i] + g) * n + k for i, g in groups for k in range(n)]
    gen = concat_generations([d.gen for d in real], run.models.tokenizer.pad_token_id).select(rows)
    result = merge_results([d.result for d in real]).select(rows)
    prompts = [draws[i].prompts[g] for i, g in groups]
    selected = torch.tensor([(i, g) in kept for i, g in groups for _ in range(n)], dtype=torch.bool)
    metrics = {
        "dynamic/draws": float(len(draws)),
        "dynamic/refilled_frac": dist.all_reduce_sum(sum(i > 0 for i, _ in kept)) / max(dist.all_reduce_sum(quota), 1),
        f"dynamic/filtered_groups/{run.config.algorithm.dynamic_sampling_filter}": dist.all_reduce_sum(filtered),
        "dynamic/short_groups": dist.all_reduce_sum(len(fill)),
    }
    return StepSamples(prompts, [p for p in prompts for _ in range(n)], gen, result, selected,
                       sum(d.generate_s for d in draws), sum(d.score_s for d in draws), metrics)
