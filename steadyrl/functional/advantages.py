"""Advantage estimators, in a registry by name.

Shapes: ``scores [B]`` (one reward per response), ``token_rewards [B, T]``, ``values [B, T]``,
``response_mask [B, T]`` (1 on real response tokens). Groups are contiguous rows of
``group_size``. Everything is float32 (float64 for float64 input) and 0 on padding.

Outcome estimators (from ``scores``), broadcast to every valid token, ``mu_g`` and ``sigma_g``
being the group's mean and unbiased std:

* ``grpo``:  ``A_i = (s_i - mu_g) / (sigma_g + eps)``; without std: ``s_i - mu_g`` (Dr. GRPO)
* ``rloo``:  ``A_i = s_i - mean_{j != i} s_j = n/(n-1) * (s_i - mu_g)``
* ``reinforce_plus_plus_baseline``: ``s_i - mu_g``, then whitened over the batch's valid tokens
* ``opo``:   ``A_i = s_i - sum_j L_j s_j / sum_j L_j`` (length-weighted baseline, L = length)
* ``grpo_passk``: only the best sample of a group gets ``(s_max - s_second) / (sigma_g + eps)``

Token-reward estimators (from ``token_rewards``):

* ``gae``: ``delta_t = r_t + gamma V_{t+1} - V_t``, ``A_t = delta_t + gamma lam A_{t+1}``,
  ``returns = A + V``; ``V`` after the last valid token is 0.
* ``reinforce_plus_plus``: ``G_t = sum_{k >= t} gamma^(k-t) r_k``, whitened over valid tokens.
* ``token_reward``: ``A_t = r_t``, each valid token's own reward: no discount (gamma 0), no
  baseline, no whitening. With on-policy distillation's token rewards ``r_t = -(log pi_student(y_t)
  - log pi_teacher(y_t))`` and no task score this is Thinking Machines' per-token reverse-KL advantage.

A group of one, or a group whose scores are all equal, gets advantage 0 (never NaN). Grouped
estimators take an optional ``sample_mask [B]``: invalid samples (a reward function failed)
enter no group statistic and get advantage 0.

Episodes of several rows (step-wise multi-turn: ``episode_size`` contiguous rows per episode, see
:mod:`.group_stats`): ``grpo``, ``rloo`` and ``reinforce_plus_plus_baseline`` take ``episode_size`` and
``group_stats`` (``"episode"``: each episode counts once in the group's mean, std and RLOO baseline;
``"sample"``: each row does). RLOO's baseline always leaves the row's whole episode out. With one
row per episode both countings are the formulas above, exactly.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Literal

import torch

from .constants import GAE_LAMBDA, GAMMA, NORM_EPS
from .group_stats import episode_group_mean_std, leave_episode_out_baseline
from .rewards import check_groups, group_mean_std
from .stats import acc_dtype, masked_whiten

__all__ = [
    "AdvantageEstimator",
    "ADVANTAGE_ESTIMATORS",
    "register_advantage",
    "compute_advantages",
    "gae_advantages",
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_plus_plus_advantages",
    "token_reward_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "opo_advantages",
    "grpo_passk_advantages",
]


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator: its function and what it consumes."""

    name: str
    fn: Callable
    uses: Literal["scores", "token_rewards"]
    needs_values: bool = False
    grouped: bool = False
    options: tuple[str, ...] = ()
    masks_samples: bool = True
    episodic: bool = False


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_advantage(
    name: str, uses: Literal["scores", "token_rewards"], needs_values: bool = False, grouped: bool = False,
    options: tuple[str, ...] = (), masks_samples: bool = True, episodic: bool = False,
):
    """Decorator: register an advantage estimator under ``name``: all the trainer and the config
    need to know about it is declared here.

    ``grouped``: it compares a prompt's responses with each other (the config refuses
    ``rollout.group_size < 2`` for it); ``options``: the ``algorithm.*`` settings it takes, passed
    as keyword arguments of the same name; ``masks_samples``: it takes ``sample_mask [B]`` (samples
    whose reward is invalid stay out of its statistics); ``episodic``: it takes ``episode_size``, the
    rows per episode (step-wise multi-turn), which the trainer passes.
    """

    def wrap(fn):
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        accepted = inspect.signature(fn).parameters
        needed = options + (("sample_mask",) if masks_samples else ()) + (("episode_size",) if episodic else ())
        missing = [o for o in needed if o not in accepted]
        if missing:
            raise ValueError(f"advantage estimator {name!r} declares {missing}, which {fn.__name__} does not take")
        ADVANTAGE_ESTIMATORS[name] = AdvantageEstimator(name, fn, uses, needs_values, grouped, options, masks_samples,
                                                        episodic)
        return fn

    return wrap


def _broadcast(per_seq: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` -> ``[B, T]``: the sequence's value on each valid token, 0 on padding."""
    keep = response_mask.bool() if response_mask.dtype != torch.bool else response_mask
    zero = torch.zeros((), dtype=per_seq.dtype, device=per_seq.device)
    return torch.where(keep, per_seq.unsqueeze(-1), zero)


def _scores(
    scores: torch.Tensor, response_mask: torch.Tensor, group_size: int, sample_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores in the accumulation dtype (invalid ones set to 0) and the ``[B]`` validity mask."""
    if response_mask.dim() != 2 or response_mask.shape[0] != scores.shape[0]:
        raise ValueError(
            f"response_mask must be [B, T] with B = {scores.shape[0]}, got {tuple(response_mask.shape)}"
        )
    check_groups(scores, group_size)
    if sample_mask is None:
        keep = torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    elif sample_mask.shape != scores.shape:
        raise ValueError(f"sample_mask shape {tuple(sample_mask.shape)} must equal scores shape {tuple(scores.shape)}")
    else:
        keep = sample_mask.bool()
    s = scores.to(acc_dtype(scores))
    return torch.where(keep, s, torch.zeros((), dtype=s.dtype, device=s.device)), keep


@register_advantage("gae", uses="token_rewards", needs_values=True, options=("gamma", "lam"), masks_samples=False)
def gae_advantages(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = GAMMA,
    lam: float = GAE_LAMBDA,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation -> ``(advantages, returns)``, both ``[B, T]``, raw.

    ``delta_t = r_t + gamma * V_next - V_t`` and ``A_t = delta_t + gamma * lam * A_next``, where
    "next" is the next *valid* token (masked positions are skipped, so holes and right padding
    work alike) and ``V`` after the last valid token is 0. ``returns = A + V``. Not whitened.
    """
    if token_rewards.shape != values.shape or values.shape != response_mask.shape:
        raise ValueError(
            "token_rewards, values and response_mask must share one shape, got "
            f"{tuple(token_rewards.shape)}, {tuple(values.shape)}, {tuple(response_mask.shape)}"
        )
    dtype = acc_dtype(values)
    keep = response_mask.bool() if response_mask.dtype != torch.bool else response_mask
    zero = torch.zeros((), dtype=dtype, device=values.device)
    r = torch.where(keep, token_rewards.to(dtype), zero)
    v = torch.where(keep, values.to(dtype), zero)
    advantages = torch.zeros_like(v)
    next_value = torch.zeros_like(v[:, 0])
    next_adv = torch.zeros_like(v[:, 0])
    for t in reversed(range(v.shape[1])):
        delta = r[:, t] + gamma * next_value - v[:, t]
        adv_t = delta + gamma * lam * next_adv
        valid = keep[:, t]
        advantages[:, t] = torch.where(valid, adv_t, zero)
        next_value = torch.where(valid, v[:, t], next_value)
        next_adv = torch.where(valid, adv_t, next_adv)
    returns = torch.where(keep, advantages + v, zero)
    return advantages, returns


@register_advantage("grpo", uses="scores", grouped=True, options=("norm_by_std", "group_stats"), episodic=True)
def grpo_advantages(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_size: int,
    norm_by_std: bool = True,
    eps: float = NORM_EPS,
    sample_mask: torch.Tensor | None = None,
    episode_size: int = 1,
    group_stats: str = "episode",
) -> torch.Tensor:
    """GRPO: ``(s_i - group mean) / (unbiased group std + eps)`` on every valid token.

    ``norm_by_std=False`` drops the division (Dr. GRPO). A group of one or of equal scores gives 0.
    Episodes of ``episode_size`` rows count as ``group_stats`` says (module doc).
    """
    s, keep = _scores(scores, response_mask, group_size, sample_mask)
    mean, std = episode_group_mean_std(s, keep, group_size, episode_size, group_stats)
    adv = s - mean
    if norm_by_std:
        adv = adv / (std + eps)
    return _broadcast(torch.where(keep, adv, torch.zeros_like(adv)), response_mask)


@register_advantage("rloo", uses="scores", grouped=True, options=("group_stats",), episodic=True)
def rloo_advantages(
    scores: torch.Tensor, response_mask: torch.Tensor, group_size: int, sample_mask: torch.Tensor | None = None,
    episode_size: int = 1, group_stats: str = "episode",
) -> torch.Tensor:
    """RLOO: ``A_i = s_i - mean_{j != i} s_j = n / (n - 1) * (s_i - group mean)``; 0 for n = 1.
    With episodes of ``episode_size > 1`` rows the baseline is the mean over the *other episodes*
    (their rows or their values, as ``group_stats`` says; module doc), 0 without another."""
    s, keep = _scores(scores, response_mask, group_size, sample_mask)
    if episode_size != 1:
        baseline, others = leave_episode_out_baseline(s, keep, group_size, episode_size, group_stats)
        adv = torch.where(keep & others, s - baseline, torch.zeros_like(s))
        return _broadcast(adv, response_mask)
    mean, _ = episode_group_mean_std(s, keep, group_size, episode_size, group_stats)
    n = keep.reshape(-1, group_size).sum(-1, keepdim=True).expand(-1, group_size).reshape(-1).to(s.dtype)
    adv = torch.where(keep & (n > 1), (s - mean) * n / (n - 1).clamp(min=1), torch.zeros_like(s))
    return _broadcast(adv, response_mask)


@register_advantage("reinforce_plus_plus", uses="token_rewards", options=("gamma",))
def reinforce_plus_plus_advantages(
    token_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = GAMMA,
    sample_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """REINFORCE++: discounted return-to-go ``G_t = r_t + gamma * G_{t+1}`` over valid tokens
    (padding contributes nothing), whitened over all valid tokens of the batch. Samples with
    ``sample_mask [B]`` False (an invalid reward) are left out of the whitening statistics."""
    dtype = acc_dtype(token_rewards)
    keep = response_mask.bool() if response_mask.dtype != torch.bool else response_mask
    zero = torch.zeros((), dtype=dtype, device=token_rewards.device)
    r = torch.where(keep, token_rewards.to(dtype), zero)
    returns = torch.zeros_like(r)
    running = torch.zeros_like(r[:, 0])
    for t in reversed(range(r.shape[1])):
        running = torch.where(keep[:, t], r[:, t] + gamma * running, running)
        returns[:, t] = running
    counted = keep if sample_mask is None else keep & sample_mask.bool().unsqueeze(-1)
    return masked_whiten(returns, counted)


@register_advantage("token_reward", uses="token_rewards")
def token_reward_advantages(
    token_rewards: torch.Tensor, response_mask: torch.Tensor, sample_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``A_t = r_t`` on valid tokens, 0 on padding and on samples with ``sample_mask [B]`` False: the
    token's own reward, undiscounted, with no baseline and no whitening (on-policy distillation as
    Thinking Machines run it: the per-token reverse-KL reward is the advantage, discount 0)."""
    if token_rewards.shape != response_mask.shape:
        raise ValueError(f"token_rewards {tuple(token_rewards.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} must have the same [B, T] shape")
    dtype = acc_dtype(token_rewards)
    keep = response_mask.bool() if response_mask.dtype != torch.bool else response_mask
    if sample_mask is not None:
        keep = keep & sample_mask.bool().unsqueeze(-1)
    return torch.where(keep, token_rewards.to(dtype), torch.zeros((), dtype=dtype, device=token_rewards.device))


@register_advantage("reinforce_plus_plus_baseline", uses="scores", grouped=True, options=("group_stats",),
                    episodic=True)
def reinforce_plus_plus_baseline_advantages(
    scores: torch.Tensor, response_mask: torch.Tensor, group_size: int, sample_mask: torch.Tensor | None = None,
    episode_size: int = 1, group_stats: str = "episode",
) -> torch.Tensor:
    """REINFORCE++ with a group baseline: ``s_i - group mean`` (episodes counted as ``group_stats``
    says) broadcast to tokens, then whitened over all valid tokens of the batch."""
    s, keep = _scores(scores, response_mask, group_size, sample_mask)
    mean, _ = episode_group_mean_std(s, keep, group_size, episode_size, group_stats)
    token_mask = (response_mask != 0) & keep.unsqueeze(-1)
    return masked_whiten(_broadcast(s - mean, token_mask), token_mask)


@register_advantage("opo", uses="scores", grouped=True)
def opo_advantages(
    scores: torch.Tensor, response_mask: torch.Tensor, group_size: int, sample_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """OPO: ``A_i = s_i - b_g`` with the length-weighted baseline ``b_g = sum L_j s_j / sum L_j``
    (``L_j`` = number of valid tokens of sample ``j``). A group of one gets 0."""
    s, keep = _scores(scores, response_mask, group_size, sample_mask)
    if group_size == 1:
        return _broadcast(torch.zeros_like(s), response_mask)
    lengths = ((response_mask != 0) & keep.unsqueeze(-1)).to(s.dtype).sum(-1).reshape(-1, group_size)
    grouped = s.reshape(-1, group_size)
    total = lengths.sum(-1, keepdim=True)
    weighted = (lengths * grouped).sum(-1, keepdim=True) / total.clamp(min=1)
    baseline = torch.where(total > 0, weighted, grouped.mean(-1, keepdim=True))
    adv = (grouped - baseline).reshape(-1)
    return _broadcast(torch.where(keep, adv, torch.zeros_like(adv)), response_mask)


@register_advantage("grpo_passk", uses="scores", grouped=True, options=("norm_by_std",))
def grpo_passk_advantages(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_size: int,
    norm_by_std: bool = True,
    eps: float = NORM_EPS,
    sample_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pass@k GRPO: in each group only the best sample (first on ties) gets
    ``(s_max - s_second_max) / (group std + eps)`` (no division without ``norm_by_std``); the
    rest get 0. A group of one (or with one valid sample) gets 0."""
    s, keep = _scores(scores, response_mask, group_size, sample_mask)
    if group_size == 1:
        return _broadcast(torch.zeros_like(s), response_mask)
    grouped = torch.where(keep, s, torch.full((), float("-inf"), dtype=s.dtype, device=s.device))
    grouped = grouped.reshape(-1, group_size)
    top2 = grouped.topk(2, dim=-1)
    enough = keep.reshape(-1, group_size).sum(-1) >= 2
    gap = torch.where(enough, top2.values[:, 0] - top2.values[:, 1].clamp(min=torch.finfo(s.dtype).min),
                      torch.zeros((), dtype=s.dtype, device=s.device))
    if norm_by_std:
        _, std = group_mean_std(s, group_size, keep)
        gap = gap / (std.reshape(-1, group_size)[:, 0] + eps)
    adv = torch.zeros_like(grouped)
    adv.scatter_(1, top2.indices[:, :1], gap.unsqueeze(1))
    adv = torch.where(keep.reshape(-1, group_size), adv, torch.zeros_like(adv))
    return _broadcast(adv.reshape(-1), response_mask)


def compute_advantages(
    name: str,
    response_mask: torch.Tensor,
    *,
    scores: torch.Tensor | None = None,
    token_rewards: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    group_size: int = 1,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the estimator ``name`` on what it uses -> ``(advantages, returns)``.

    For every estimator but GAE the returns are the advantages (as in verl). ``kwargs`` go to the
    estimator (``gamma``, ``lam``, ``norm_by_std``, ``eps``, and for grouped outcome estimators
    ``sample_mask [B]``: samples whose reward is invalid, left out of the group statistics).
    """
    try:
        est = ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"advantage estimator {name!r} is not one of {sorted(ADVANTAGE_ESTIMATORS)}"
        ) from None
    if est.uses == "scores":
        if scores is None:
            raise ValueError(f"advantage estimator {name!r} needs scores [B]")
        adv = est.fn(scores, response_mask, group_size, **kwargs)
        return adv, adv
    if token_rewards is None:
        raise ValueError(f"advantage estimator {name!r} needs token_rewards [B, T]")
    if est.needs_values:
        if values is None:
            raise ValueError(f"advantage estimator {name!r} needs values [B, T] from a critic")
        return est.fn(token_rewards, values, response_mask, **kwargs)
    adv = est.fn(token_rewards, response_mask, **kwargs)
    return adv, adv
