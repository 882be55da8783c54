"""A step's episodes as turn samples (``rollout.multi_turn.mode: stepwise``), for reward processing and the update.

The rollout returns one row per episode (scored as an episode: rewards read the whole transcript)
with each turn's sample in ``EpisodeInfo.samples``. Before the update, :func:`expand_turn_samples`
lays the step out as turn samples: ``slots`` rows per episode, ``slots`` = the most turns of any
episode of the step on any rank (a slot past an episode's last turn is an empty row that enters
nothing). Every sample carries its episode's score and validity, so the samples of one episode
share its reward; groups stay contiguous, ``group_size * slots`` rows per prompt (``slots`` rows per
episode: the ``episode_size`` of reward processing). GRPO's mean and std and RLOO's baseline count
each episode once (``algorithm.group_stats: episode``) or each turn sample (``sample``), and RLOO
leaves a sample's whole episode out (:mod:`steadyrl.functional.group_stats`); the difficulty mask
and reward normalisation count turn samples, as the loss counts every turn's tokens.
``reward/*`` and ``rollout/*`` metrics stay per episode; ``response/length_*`` are per sample.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .. import distributed as dist
from ..rollout.stepwise import split_episodes


def needs_turn_samples(agent, drawn) -> bool:
    """Whether this step trains turn samples: always in step-wise mode; with an agent through the
    gateway (``rollout.multi_turn.agent``), when an episode of the step on any rank made more than one
    trajectory (it rewrote its history: each trajectory is then a sample of the episode)."""
    if agent is None:
        return False
    if agent.multi_turn_mode == "stepwise":
        return True
    if not agent.splits_trajectories:
        return False
    many = any(len(e.samples or []) > 1 for e in drawn.gen.episodes or [])
    return bool(dist.all_reduce_max(int(many)))


def expand_turn_samples(drawn, tokenizer):
    """``(drawn with one row per turn sample, slots)``: ``gen``, ``result``, ``selected`` and
    ``samples`` repeated or split ``slots`` times per episode (see the module docstring)."""
    episodes = drawn.gen.episodes or []
    slots = int(dist.all_reduce_max(max([1, *(len(e.samples or []) for e in episodes)])))
    gen = split_episodes(drawn.gen, slots, tokenizer.pad_token_id, tokenizer)
    rows = [i for i in range(len(drawn.gen)) for _ in range(slots)]
    result = drawn.result.select(rows)
    result.valid = result.valid & gen.response_mask.any(-1)  # an empty slot is no sample
    selected = None if drawn.selected is None else drawn.selected[torch.tensor(rows, dtype=torch.long)]
    return replace(drawn, gen=gen, result=result, selected=selected,
                   samples=[drawn.samples[i] for i in rows]), slots


def episode_view(whole, episodes):
    """``whole`` (the step's samples over all ranks) with every rank's episodes and their scores
    in place of the turn samples': what the reward and episode metrics count."""
    from .global_batch import merge_results

    parts = dist.gather_objects({"result": episodes.result, "episodes": episodes.gen.episodes})
    return replace(whole, result=merge_results([p["result"] for p in parts]),
                   episodes=[e for p in parts for e in (p["episodes"] or [])])
