"""From raw scores to advantages: the reward pipeline of one step, in the order of seed 001.

1. response-level clip of the scores to ``[-reward_clip, reward_clip]``;
2. normalisation (``reward_norm_mean`` / ``reward_norm_std``: batch, group, running or none),
   within each reward domain with ``reward_norm_by_domain`` (``domains``: an id per sample);
3. token rewards: the score on the last valid token, minus ``kl_coef * KL`` per token when the
   KL is in the reward (``kl_mode: reward``); in a multi-turn episode an environment's reward for
   an earlier turn sits on that turn's last token instead (``turn_rewards``), and the last token
   holds the rest, so every row still sums to its processed score;
4. token-level clip to ``[-reward_clip, reward_clip]``;
5. sample masks: invalid rewards, the difficulty mask, truncated responses; difficulty weights;
6. the advantage estimator (outcome estimators read each row's summed token rewards; samples
   whose reward is invalid stay out of their group's statistics);
7. optional whitening over the valid tokens;
8. advantage clip to ``[-advantage_clip, advantage_clip]``.

A pure function of tensors and the algorithm config, so the whole path can be tested with
hostile inputs (rewards of ±1e6, equal rewards, groups of one, empty responses).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from ..config.schema import AlgorithmConfig
from ..functional import (
    ADVANTAGE_ESTIMATORS,
    RunningMoments,
    clip_fraction,
    clip_rewards,
    compute_advantages,
    difficulty_mask,
    difficulty_weights,
    group_mean_std,
    kl_penalty,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    normalize_rewards,
    normalize_rewards_by_domain,
)


@dataclass
class Processed:
    advantages: torch.Tensor  # [B, R]
    returns: torch.Tensor  # [B, R]
    loss_mask: torch.Tensor  # [B, R] response_mask of the samples that enter the loss
    sample_weights: torch.Tensor | None  # [B] difficulty weights, or None
    metrics: dict[str, float]


def _last_token_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, R]`` zeros with each row's score on its last valid token."""
    out = torch.zeros(mask.shape, dtype=scores.dtype)
    lengths = mask.sum(-1)
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    last = (mask.cumsum(-1) == lengths.unsqueeze(-1)) & mask
    index = last.float().argmax(-1)
    out[rows, index[rows]] = scores[rows]
    return out


def _estimator_options(algo: AlgorithmConfig, valid: torch.Tensor) -> dict:
    """The options the estimator takes, by the names of its parameters: a new estimator is one
    decorated function in :mod:`steadyrl.functional.advantages`, nothing to add here."""
    offered = {"norm_by_std": algo.norm_by_std, "gamma": algo.gamma, "lam": algo.lam, "sample_mask": valid}
    accepted = inspect.signature(ADVANTAGE_ESTIMATORS[algo.advantage_estimator].fn).parameters
    return {name: value for name, value in offered.items() if name in accepted}


def _sample_masks(raw, valid, truncated, algo: AlgorithmConfig, group_size: int, metrics: dict):
    """``(keep [B], weights [B] or None)``: valid rewards, the difficulty mask, truncation."""
    keep = valid.clone()
    if algo.difficulty_mask:
        kept = difficulty_mask(raw, group_size, algo.difficulty_low, algo.difficulty_high, mask=valid)
        metrics["batch/difficulty_kept_frac"] = float(kept.float().mean())
        keep &= kept
    if algo.mask_truncated:
        keep &= ~truncated.bool()
    weights = difficulty_weights(raw, group_size, mask=valid) if algo.difficulty_weighting else None
    return keep, weights


def _batch_metrics(advantages, returns, loss_mask, raw, valid, keep, group_size: int) -> dict[str, float]:
    _, group_std = group_mean_std(raw, group_size, valid)
    return {
        "critic/advantages_mean": float(masked_mean(advantages, loss_mask)),
        "critic/advantages_std": float(masked_var(advantages, loss_mask).clamp(min=0).sqrt()),
        "critic/returns_mean": float(masked_mean(returns, loss_mask)),
        "batch/zero_std_group_frac": float((group_std.reshape(-1, group_size)[:, 0] == 0).float().mean()),
        "batch/valid_sample_frac": float(keep.float().mean()),
    }


def process_rewards(
    scores: torch.Tensor,
    valid: torch.Tensor,
    response_mask: torch.Tensor,
    truncated: torch.Tensor,
    algo: AlgorithmConfig,
    group_size: int,
    *,
    kl_coef: float = 0.0,
    old_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    running: RunningMoments | None = None,
    turn_rewards: torch.Tensor | None = None,
    domains: torch.Tensor | None = None,
) -> Processed:
    """Run steps 1-8 (module docstring) on one step's samples. Inputs are not modified.

    The pipeline runs in float64 (the tensors are ``[B]`` and ``[B, R]``: the cost is nil): a
    float32 variance overflows for rewards of ~2e19, turning a normalised advantage into 0 (no
    signal) or NaN. The advantages and returns come back float32. A score that is not finite
    counts as invalid even if ``valid`` says otherwise. ``response_mask`` is the mask of the
    tokens that can be trained on (in an episode, the policy's own tokens: observations are never
    rewarded, counted or trained on); ``turn_rewards [B, R]`` the earlier turns' rewards at
    their last tokens (zeros elsewhere), or None. ``domains [B]``: an integer domain id per sample,
    used with ``algo.reward_norm_by_domain`` (None: one domain).
    """
    mask = response_mask.bool()
    valid = valid.bool() & mask.any(-1) & torch.isfinite(scores)
    raw = torch.where(valid, scores.double(), torch.zeros((), dtype=torch.float64))
    metrics: dict[str, float] = {}
    clip = algo.reward_clip

    # 1-2. response-level clip, normalisation
    metrics["critic/reward_clip_frac"] = float(clip_fraction(raw, -clip, clip, valid)) if clip else 0.0
    if algo.reward_norm_by_domain and domains is not None:
        s = normalize_rewards_by_domain(clip_rewards(raw, clip), domains, group_size, algo.reward_norm_mean,
                                        algo.reward_norm_std, mask=valid)
    else:
        s = normalize_rewards(clip_rewards(raw, clip), group_size, algo.reward_norm_mean,
                              algo.reward_norm_std, running=running, mask=valid)

    # 3-4. token rewards, KL in the reward, token-level clip
    token_rewards = _last_token_rewards(s, mask)
    if turn_rewards is not None:  # earlier turns' rewards where they were earned; the row sum stays s
        earlier = torch.where(mask & valid.unsqueeze(-1), turn_rewards.double(), torch.zeros((), dtype=torch.float64))
        token_rewards = token_rewards + earlier - _last_token_rewards(earlier.sum(-1), mask)
    if algo.kl_mode == "reward" and ref_logprobs is not None and kl_coef > 0:
        kl = kl_penalty(old_logprobs.double(), ref_logprobs.double(), algo.kl_estimator)
        token_rewards = token_rewards - kl_coef * torch.where(mask, kl, torch.zeros((), dtype=kl.dtype))
    metrics["critic/token_reward_clip_frac"] = (
        float(clip_fraction(token_rewards, -clip, clip, mask)) if clip else 0.0)
    token_rewards = clip_rewards(token_rewards, clip)

    # 5. sample masks and weights
    keep, weights = _sample_masks(raw, valid, truncated, algo, group_size, metrics)

    # 6. advantages
    seq_scores = masked_sum(token_rewards, mask, dim=-1)
    advantages, returns = compute_advantages(
        algo.advantage_estimator, response_mask, scores=seq_scores, token_rewards=token_rewards,
        values=None if values is None else values.double(), group_size=group_size,
        **_estimator_options(algo, valid))

    # 7-8. whitening, advantage clip
    loss_mask = mask & keep.unsqueeze(-1)
    if algo.whiten_advantages:
        advantages = masked_whiten(advantages, loss_mask)
    if algo.advantage_clip:
        c = algo.advantage_clip
        metrics["critic/advantage_clip_frac"] = float(clip_fraction(advantages, -c, c, loss_mask))
        advantages = advantages.clamp(-c, c)
    else:
        metrics["critic/advantage_clip_frac"] = 0.0

    metrics.update(_batch_metrics(advantages, returns, loss_mask, raw, valid, keep, group_size))
    zero = torch.zeros((), dtype=torch.float64)
    return Processed(
        advantages=torch.where(loss_mask, advantages, zero).float(),
        returns=torch.where(mask, returns, zero).float(),
        loss_mask=loss_mask.long(),
        sample_weights=None if weights is None else weights.float(),
        metrics=metrics,
    )
