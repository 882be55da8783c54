"""Group statistics over episodes: what GRPO's mean and std and RLOO's baseline count when an episode
is several rows (step-wise multi-turn: one row per turn, all carrying the episode's reward).

Layout: groups are contiguous rows of ``group_size``; inside a group each episode is ``episode_size``
contiguous rows (its turns, then empty slots that are invalid rows), so ``group_size`` is a multiple
of ``episode_size``. With ``episode_size = 1`` every function here is the per-sample statistic.

``counting`` (``algorithm.group_stats``):

* ``"episode"``: each episode counts once. Its value is the mean of its valid rows' scores
  ``v_e`` (the rows share the episode's reward; a KL penalty in the reward can make them differ),
  the group's mean and unbiased std are those of the ``v_e`` of its valid episodes, and a row's
  leave-one-out baseline is the mean of the other episodes' ``v_e``.
* ``"sample"``: each valid row counts once (an episode of ``t`` turns ``t`` times); a row's
  leave-one-out baseline is the mean of the valid rows of the *other* episodes.

Either way RLOO leaves the row's whole episode out: its sibling turns share its reward, so a baseline
that kept them would depend on the sample (a biased advantage). Means are taken about a valid entry
(:func:`~steadyrl.functional.stats.masked_mean`), so equal scores give exactly their value and an
advantage of exactly 0.
"""

from __future__ import annotations

import torch

from .rewards import check_groups, group_mean_std
from .stats import masked_mean, masked_var

__all__ = ["GROUP_STATS", "episode_group_mean_std", "leave_episode_out_baseline"]

GROUP_STATS = ("episode", "sample")
"""How episodes of several rows count in group statistics (module doc)."""


def _layout(scores: torch.Tensor, group_size: int, episode_size: int, counting: str) -> tuple[int, int]:
    """``(groups, episodes per group)``; raises ``ValueError`` naming a bad argument."""
    groups = check_groups(scores, group_size)
    if counting not in GROUP_STATS:
        raise ValueError(f"group_stats {counting!r} is not one of {list(GROUP_STATS)}")
    if not isinstance(episode_size, int) or episode_size < 1 or group_size % episode_size:
        raise ValueError(f"episode_size={episode_size!r} must be a whole number >= 1 that divides group_size="
                         f"{group_size} (each episode is episode_size contiguous rows of its group)")
    return groups, group_size // episode_size


def _episode_values(s: torch.Tensor, keep: torch.Tensor, shape: tuple[int, int, int]):
    """``(v [G, E], valid episodes [G, E])``: each episode's mean over its valid rows."""
    s3, k3 = s.reshape(shape), keep.reshape(shape)
    return masked_mean(s3, k3, dim=-1), k3.any(-1)


def episode_group_mean_std(scores: torch.Tensor, keep: torch.Tensor, group_size: int, episode_size: int = 1,
                           counting: str = "episode") -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, its group's mean and unbiased std ``[B]`` (module doc); ``keep [B]`` bool: the valid
    rows. One row per episode, or ``counting="sample"``: exactly :func:`group_mean_std`."""
    groups, episodes = _layout(scores, group_size, episode_size, counting)
    if episode_size == 1 or counting == "sample":
        return group_mean_std(scores, group_size, keep)
    v, valid = _episode_values(scores, keep, (groups, episodes, episode_size))
    mean = masked_mean(v, valid, dim=-1)
    std = masked_var(v, valid, unbiased=True, dim=-1).clamp(min=0).sqrt()
    return mean.repeat_interleave(group_size), std.repeat_interleave(group_size)


def leave_episode_out_baseline(scores: torch.Tensor, keep: torch.Tensor, group_size: int, episode_size: int = 1,
                               counting: str = "episode") -> tuple[torch.Tensor, torch.Tensor]:
    """``(baseline [B], has_others [B] bool)``: per row, the mean over its group's other episodes
    (their ``v_e``, or their valid rows with ``counting="sample"``), and whether there is any."""
    groups, episodes = _layout(scores, group_size, episode_size, counting)
    dev = scores.device
    other = ~torch.eye(episodes, dtype=torch.bool, device=dev)  # [E, E']: e' is another episode than e
    if counting == "episode":
        v, valid = _episode_values(scores, keep, (groups, episodes, episode_size))
        values = v.unsqueeze(1).expand(groups, episodes, episodes)
        others = valid.unsqueeze(1) & other.unsqueeze(0)
    else:
        rows = other.repeat_interleave(episode_size, dim=1)  # [E, E * K]
        values = scores.reshape(groups, 1, group_size).expand(groups, episodes, group_size)
        others = keep.reshape(groups, 1, group_size) & rows.unsqueeze(0)
    baseline = masked_mean(values, others, dim=-1)  # [G, E]
    has = others.any(-1)
    return baseline.repeat_interleave(episode_size, dim=-1).reshape(-1), has.repeat_interleave(
        episode_size, dim=-1).reshape(-1)
