"""From raw scores to advantages: the reward pipeline of one step, in the order of seed 001.

0. shaping: DAPO's soft overlong punishment (``overlong_buffer``) added to each valid score;
1. response-level clip of the scores to ``[-reward_clip, reward_clip]``;
2. normalisation (``reward_norm_mean`` / ``reward_norm_std``: batch, group, running or none),
   within each reward domain with ``reward_norm_by_domain`` (``domains``: an id per sample);
3. token-level clip of the normalised score to ``[-reward_clip, reward_clip]``: the processed
   score ``p``, placed on the last valid token; in a multi-turn episode an environment's reward
   for an earlier turn sits on that turn's last token, scaled as the score was (the clip of the
   episode's score as a scaling, the normalisation's slope), and the last token holds the rest,
   so every row sums to ``p`` (:mod:`steadyrl.functional.token_rewards` has the formula);
4. KL in the reward (``kl_mode: reward``): minus ``kl_coef * KL`` per token, each token's penalty
   clipped to ``[-reward_clip, reward_clip]``; a row then sums to ``p`` minus its penalties;
5. sample masks: invalid rewards, the difficulty mask, truncated responses; difficulty weights;
6. the advantage estimator (outcome estimators read each row's sum: ``p`` minus the row's KL
   penalties; samples whose reward is invalid stay out of their group's statistics);
   on-policy distillation (``teacher_logprobs``) adds ``-distill_coef * (log pi_old - log pi_teacher)``
   per policy token in step 4, beside the KL penalty (clipped as it is), so outcome estimators see its
   row sum and per-token estimators (``reinforce_plus_plus``, ``gae``) see it token by token; with
   ``task_rewards=False`` (pure distillation) every valid score counts as 0 in steps 0-3;
7. optional whitening over the valid tokens;
8. advantage clip to ``[-advantage_clip, advantage_clip]``.

With ``reward_aggregation: normalize_then_sum`` (GDPO) and several reward functions, steps 1-2 and 6
are GDPO's instead: each reward normalised in its group, the weighted sum normalised over the batch
is every token's advantage (:func:`steadyrl.functional.normalize_then_sum`).

A pure function of tensors and the algorithm config, so the whole path can be tested with
hostile inputs (rewards of ±1e6, equal rewards, groups of one, empty responses).
"""

from __future__ import annotations

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
    distillation_metrics,
    distillation_token_rewards,
    episode_reward_scale,
    episode_token_rewards,
    group_mean_std,
    kl_penalty,
    last_token_rewards,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    normalize_rewards,
    normalize_rewards_by_domain,
    normalize_then_sum,
    overlong_penalty,
)


@dataclass
class RewardComponents:
    """Each reward function's own score per sample, for GDPO: ``scores [B, K]`` (float64),
    ``valid [B, K]`` (the function applied and returned a finite number), ``weights [K]``, ``names``."""

    scores: torch.Tensor
    valid: torch.Tensor
    weights: torch.Tensor
    names: list[str]


def reward_components(result) -> RewardComponents | None:
    """The per-function scores of a scoring result (``names``, ``raw``, ``weights``, ``applies``),
    or None with fewer than two functions."""
    names = list(result.names)
    if len(names) < 2:
        return None
    cols, valid = [], []
    for name in names:
        applies = result.applies(name)
        raw = [v if (v is not None and ok) else float("nan") for v, ok in zip(result.raw[name], applies)]
        col = torch.tensor(raw, dtype=torch.float64)
        cols.append(torch.nan_to_num(col, nan=0.0, posinf=0.0, neginf=0.0))
        valid.append(torch.isfinite(col))
    return RewardComponents(torch.stack(cols, 1), torch.stack(valid, 1),
                            torch.tensor([float(result.weights.get(n, 1.0)) for n in names], dtype=torch.float64),
                            names)


def policy_turn_lengths(policy_mask: torch.Tensor) -> list[list[int]]:
    """Each row's policy turns' lengths: the runs of 1s in its policy mask (observations between)."""
    out = []
    for row in policy_mask.bool().tolist():
        runs, n = [], 0
        for bit in row + [False]:
            if bit:
                n += 1
            elif n:
                runs.append(n)
                n = 0
        out.append(runs)
    return out


def _overlong(valid, mask, algo: AlgorithmConfig, limit: int | None, episode_lengths, metrics: dict):
    """Step 0: the soft overlong punishment ``[B]`` of each valid sample (per episode, or summed over
    its policy turns), or None when it is off."""
    if algo.overlong_buffer is None or limit is None:
        return None
    buf, factor = algo.overlong_buffer, algo.overlong_penalty_factor
    if algo.overlong_scope == "turn":
        penalty = torch.tensor([float(overlong_penalty(torch.tensor(runs or [0], dtype=torch.float64), limit, buf,
                                                       factor).sum()) for runs in policy_turn_lengths(mask)],
                               dtype=torch.float64)
    else:
        lengths = mask.sum(-1) if episode_lengths is None else episode_lengths
        penalty = overlong_penalty(lengths.double(), limit, buf, factor)
    penalty = torch.where(valid, penalty, torch.zeros((), dtype=torch.float64))
    n = valid.sum().clamp(min=1)
    metrics["critic/overlong_penalty_mean"] = float(penalty.sum() / n)
    metrics["critic/overlong_frac"] = float(((penalty < 0) & valid).sum() / n)
    return penalty


def _with_penalty(components: RewardComponents, penalty: torch.Tensor) -> RewardComponents:
    """GDPO with the overlong punishment: the penalty is one more component, of weight 1."""
    return RewardComponents(torch.cat([components.scores, penalty.unsqueeze(-1)], 1),
                            torch.cat([components.valid, torch.ones_like(penalty, dtype=torch.bool).unsqueeze(-1)], 1),
                            torch.cat([components.weights, torch.ones(1, dtype=torch.float64)]),
                            [*components.names, "overlong"])


def _gdpo(components: RewardComponents, valid, mask, group_size: int, metrics: dict):
    """GDPO's advantage ``[B, R]`` (float64) of the valid samples, and its per-component metrics."""
    comp_valid = components.valid & valid.unsqueeze(-1)
    adv, per = normalize_then_sum(components.scores, group_size, components.weights, comp_valid)
    for j, name in enumerate(components.names):
        metrics[f"critic/advantages/{name}_std"] = float(masked_var(per[:, j], comp_valid[:, j]).clamp(min=0).sqrt())
    zero = torch.zeros((), dtype=torch.float64)
    return torch.where(mask & valid.unsqueeze(-1), adv.unsqueeze(-1).expand(mask.shape), zero)


@dataclass(frozen=True)
class RewardInputs:
    """What the step knows about its samples when it processes their rewards, built once per step
    (:func:`steadyrl.recipe.train_step`); every tensor is the whole batch's (all ranks).

    ``scores [B]`` and ``valid [B]`` the scorer's; ``response_mask [B, R]`` the tokens that can be
    trained on (in an episode, the policy's own tokens: observations are never rewarded, counted or
    trained on); ``truncated [B]``; ``group_size`` rows per prompt; ``old_logprobs`` / ``ref_logprobs``
    / ``values`` / ``teacher_logprobs [B, R]`` where the step computed them (the teacher's are on-policy
    distillation's, of the sampled tokens); ``turn_rewards [B, R]`` the earlier turns' rewards at their
    last tokens (zeros elsewhere); ``domains [B]`` an integer domain id per sample (None: one domain);
    ``episode_size`` the rows per episode inside a group (step-wise turn samples, for the estimators
    that count episodes); ``components`` each reward function's scores (GDPO); ``episode_lengths [B]``
    each episode's tokens after the prompt, observations included (default: ``response_mask``'s)."""

    scores: torch.Tensor
    valid: torch.Tensor
    response_mask: torch.Tensor
    truncated: torch.Tensor
    group_size: int
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None
    turn_rewards: torch.Tensor | None = None
    domains: torch.Tensor | None = None
    episode_size: int = 1
    components: RewardComponents | None = None
    episode_lengths: torch.Tensor | None = None


@dataclass(frozen=True)
class RewardSettings:
    """The run's state and settings the pipeline reads beside ``algorithm.*``: the KL controller's
    current ``kl_coef``, the ``running`` reward statistics (``reward_norm_*: running``), the length the
    overlong buffer ends at (``rollout.max_new_tokens`` or the episode's limit; None: no buffer),
    ``distill_coef`` and ``task_rewards`` (``teacher.*``; ``task_rewards=False``: pure distillation, the
    scores enter as 0 and are still reported by the scorer's own metrics)."""

    kl_coef: float = 0.0
    running: RunningMoments | None = None
    overlong_limit: int | None = None
    distill_coef: float = 1.0
    task_rewards: bool = True


@dataclass
class Processed:
    advantages: torch.Tensor  # [B, R]
    returns: torch.Tensor  # [B, R]
    loss_mask: torch.Tensor  # [B, R] response_mask of the samples that enter the loss
    sample_weights: torch.Tensor | None  # [B] difficulty weights, or None
    metrics: dict[str, float]


def _token_rewards(raw, valid, mask, algo: AlgorithmConfig, inputs: RewardInputs, settings: RewardSettings,
                   metrics: dict):
    """Steps 1-4: ``(token_rewards [B, R], row sums [B])``, both float64."""
    group_size, domains, running = inputs.group_size, inputs.domains, settings.running
    old_logprobs, ref_logprobs, turn_rewards = inputs.old_logprobs, inputs.ref_logprobs, inputs.turn_rewards
    teacher_logprobs, kl_coef = inputs.teacher_logprobs, settings.kl_coef
    clip = algo.reward_clip
    metrics["critic/reward_clip_frac"] = float(clip_fraction(raw, -clip, clip, valid)) if clip else 0.0
    clipped = clip_rewards(raw, clip)
    if algo.reward_norm_by_domain and domains is not None:
        s, slope = normalize_rewards_by_domain(clipped, domains, group_size, algo.reward_norm_mean,
                                               algo.reward_norm_std, mask=valid, return_scale=True)
    else:
        s, slope = normalize_rewards(clipped, group_size, algo.reward_norm_mean, algo.reward_norm_std,
                                     running=running, mask=valid, return_scale=True)
    p = clip_rewards(s, clip)
    earlier = None if turn_rewards is None else torch.where(valid.unsqueeze(-1), turn_rewards.double(),
                                                            torch.zeros((), dtype=torch.float64))
    token_rewards = episode_token_rewards(p, episode_reward_scale(raw, clipped, slope, s, p), earlier, mask)
    zero = torch.zeros((), dtype=torch.float64)
    penalty = torch.zeros_like(token_rewards)
    if algo.kl_mode == "reward" and ref_logprobs is not None and kl_coef > 0:
        kl = kl_penalty(old_logprobs.double(), ref_logprobs.double(), algo.kl_estimator)
        penalty = torch.where(mask, kl_coef * kl, zero)
    if teacher_logprobs is not None:  # on-policy distillation: a reward, so minus it is a penalty
        metrics.update(distillation_metrics(old_logprobs, teacher_logprobs, mask))
        penalty = penalty - distillation_token_rewards(old_logprobs.double(), teacher_logprobs.double(), mask,
                                                       settings.distill_coef)
    if clip:
        counted = mask & valid.unsqueeze(-1)  # the valid samples' tokens, as critic/reward_clip_frac
        last = last_token_rewards(torch.ones_like(p), mask).bool() & (s.abs() > clip).unsqueeze(-1)
        clipped_tokens = (last | (penalty.abs() > clip)) & counted
        metrics["critic/token_reward_clip_frac"] = float(clipped_tokens.sum() / counted.sum().clamp(min=1))
        penalty = clip_rewards(penalty, clip)
    else:
        metrics["critic/token_reward_clip_frac"] = 0.0
    return token_rewards - penalty, p - masked_sum(penalty, mask, dim=-1)


def _estimator_options(algo: AlgorithmConfig, valid: torch.Tensor, episode_size: int = 1) -> dict:
    """The ``algorithm.*`` options the estimator declared at its registration, the valid samples'
    mask when it takes one, and the rows per episode when it counts episodes: a new estimator is one
    decorated function in :mod:`steadyrl.functional.advantages`, nothing to add here."""
    est = ADVANTAGE_ESTIMATORS[algo.advantage_estimator]
    options = {name: getattr(algo, name) for name in est.options}
    if est.episodic:
        options["episode_size"] = episode_size
    return {**options, "sample_mask": valid} if est.masks_samples else options


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


def _whiten_and_clip(advantages, loss_mask, algo: AlgorithmConfig, metrics: dict):
    """Steps 7-8: optional whitening over the valid tokens, then the advantage clip (and its fraction)."""
    if algo.whiten_advantages:
        advantages = masked_whiten(advantages, loss_mask)
    if not algo.advantage_clip:
        metrics["critic/advantage_clip_frac"] = 0.0
        return advantages
    c = algo.advantage_clip
    metrics["critic/advantage_clip_frac"] = float(clip_fraction(advantages, -c, c, loss_mask))
    return advantages.clamp(-c, c)


def process_rewards(inputs: RewardInputs, algo: AlgorithmConfig,
                    settings: RewardSettings = RewardSettings()) -> Processed:
    """Run steps 0-8 (module docstring) on one step's samples, stage by stage. Inputs are not modified.

    The pipeline runs in float64 (the tensors are ``[B]`` and ``[B, R]``: the cost is nil): a
    float32 variance overflows for rewards of ~2e19, turning a normalised advantage into 0 (no
    signal) or NaN. The advantages and returns come back float32. A score that is not finite
    counts as invalid even if ``inputs.valid`` says otherwise.
    """
    metrics: dict[str, float] = {}
    mask, valid, raw, components = _raw_scores(inputs, algo, settings, metrics)  # and 0. shaping
    # 1-4. clip, normalise, the processed score on the tokens, KL in the reward, distillation
    token_rewards, seq_scores = _token_rewards(raw, valid, mask, algo, inputs, settings, metrics)
    # 5. sample masks and weights
    keep, weights = _sample_masks(raw, valid, inputs.truncated, algo, inputs.group_size, metrics)
    # 6. advantages
    advantages, returns = _advantages(inputs, algo, components, valid, mask, token_rewards, seq_scores, metrics)
    # 7-8. whitening, advantage clip
    loss_mask = mask & keep.unsqueeze(-1)
    advantages = _whiten_and_clip(advantages, loss_mask, algo, metrics)

    metrics.update(_batch_metrics(advantages, returns, loss_mask, raw, valid, keep, inputs.group_size))
    zero = torch.zeros((), dtype=torch.float64)
    return Processed(
        advantages=torch.where(loss_mask, advantages, zero).float(),
        returns=torch.where(mask, returns, zero).float(),
        loss_mask=loss_mask.long(),
        sample_weights=None if weights is None else weights.float(),
        metrics=metrics,
    )


def _raw_scores(inputs: RewardInputs, algo: AlgorithmConfig, settings: RewardSettings, metrics: dict):
    """The valid samples and their raw scores ``[B]`` (float64, 0 where invalid), with step 0's soft
    overlong punishment added: ``(mask, valid, raw, components)``."""
    mask = inputs.response_mask.bool()
    valid = inputs.valid.bool() & mask.any(-1) & torch.isfinite(inputs.scores)
    scores, components = inputs.scores, inputs.components
    if not settings.task_rewards:  # pure distillation: every sample trains on the teacher's signal alone
        valid = inputs.valid.bool() & mask.any(-1)  # a failed reward still drops its sample, as dynamic sampling does
        scores = torch.zeros_like(scores, dtype=torch.float64)
        components = None
    raw = torch.where(valid, scores.double(), torch.zeros((), dtype=torch.float64))
    penalty = _overlong(valid, mask, algo, settings.overlong_limit, inputs.episode_lengths, metrics)
    if penalty is not None:
        raw = raw + penalty
        components = None if components is None else _with_penalty(components, penalty)
    return mask, valid, raw, components


def _advantages(inputs: RewardInputs, algo: AlgorithmConfig, components, valid, mask, token_rewards, seq_scores,
                metrics: dict):
    """Step 6: ``(advantages, returns)`` ``[B, R]`` float64 — the estimator's, or GDPO's (each reward
    normalised in its group, then the weighted sum over the batch)."""
    if algo.reward_aggregation == "normalize_then_sum" and components is not None:
        advantages = _gdpo(components, valid, mask, inputs.group_size, metrics)
        return advantages, advantages.clone()
    values = None if inputs.values is None else inputs.values.double()
    return compute_advantages(algo.advantage_estimator, inputs.response_mask, scores=seq_scores,
                              token_rewards=token_rewards, values=values, group_size=inputs.group_size,
                              **_estimator_options(algo, valid, inputs.episode_size))
