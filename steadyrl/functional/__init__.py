"""steadyrl.functional: the numerically stable tensor math of RL post-training.

Pure functions of tensors: no config objects, no models, no I/O, no global state
(``RunningMoments`` and the KL controllers are the small stateful objects, each with a
``state_dict``). Reductions, ``exp`` and ``log`` run in float32 or wider whatever the input
dtype. Every epsilon and clamp is a named constant in :mod:`steadyrl.functional.constants`.
"""

from ..lazy import lazy_attributes
from . import constants

# name -> the submodule that defines it, imported on first use: ``steadyrl.functional.constants``
# (which the config layer reads) must not import torch, and importing a submodule runs this file.
_LAZY = {
    # .advantages
    "ADVANTAGE_ESTIMATORS": "advantages",
    "AdvantageEstimator": "advantages",
    "compute_advantages": "advantages",
    "GROUP_STATS": "group_stats",
    "episode_group_mean_std": "group_stats",
    "leave_episode_out_baseline": "group_stats",
    "gae_advantages": "advantages",
    "grpo_advantages": "advantages",
    "grpo_passk_advantages": "advantages",
    "opo_advantages": "advantages",
    "register_advantage": "advantages",
    "reinforce_plus_plus_advantages": "advantages",
    "token_reward_advantages": "advantages",
    "reinforce_plus_plus_baseline_advantages": "advantages",
    "rloo_advantages": "advantages",
    # .aggregation
    "LOSS_AGG_MODES": "aggregation",
    "aggregate_loss": "aggregation",
    "count_tokens_and_seqs": "aggregation",
    # .kl
    "KL_ESTIMATORS": "kl",
    "AdaptiveKLController": "kl",
    "FixedKLController": "kl",
    "kl_penalty": "kl",
    "register_kl_estimator": "kl",
    # .logprobs
    "entropy_from_logits": "logprobs",
    "logprobs_and_entropy_from_logits": "logprobs",
    "logprobs_from_hidden": "logprobs",
    "logprobs_from_logits": "logprobs",
    # .logprobs_grad
    "logprobs_from_hidden_rows": "logprobs_grad",
    # .losses
    "POLICY_LOSSES": "losses",
    "POLICY_LOSS_METRIC_REDUCTIONS": "losses",
    "POLICY_LOSS_OPTIONS": "losses",
    "POLICY_LOSS_SELECTIONS": "losses",
    "sapo_policy_loss": "losses",
    "kl_cov_policy_loss": "losses",
    "clip_cov_policy_loss": "losses",
    # .selection
    "masked_quantile": "selection",
    "top_count": "selection",
    "top_count_threshold": "selection",
    "exact_top": "selection",
    "high_entropy_mask": "selection",
    "token_covariance": "selection",
    "kl_cov_select": "selection",
    "clip_cov_candidates": "selection",
    "random_subset": "selection",
    # .shaping
    "overlong_penalty": "shaping",
    "normalize_then_sum": "shaping",
    # .distill
    "distillation_token_rewards": "distill",
    "distillation_metrics": "distill",
    "cispo_policy_loss": "losses",
    "gspo_policy_loss": "losses",
    "ppo_policy_loss": "losses",
    "register_policy_loss": "losses",
    "value_loss": "losses",
    "vanilla_pg_loss": "losses",
    # .mismatch
    "CORRECTION_LEVELS": "mismatch",
    "CORRECTION_MODES": "mismatch",
    "correct_mismatch": "mismatch",
    "mismatch_metrics": "mismatch",
    "mismatch_ratios": "mismatch",
    "register_correction": "mismatch",
    # .rewards
    "NORM_TYPES": "rewards",
    "clip_fraction": "rewards",
    "clip_rewards": "rewards",
    "difficulty_groups": "rewards",
    "difficulty_mask": "rewards",
    "difficulty_weights": "rewards",
    "group_mean_std": "rewards",
    "group_scores_vary": "rewards",
    "normalize_rewards": "rewards",
    "normalize_rewards_by_domain": "rewards",
    # .token_rewards
    "episode_reward_scale": "token_rewards",
    "episode_token_rewards": "token_rewards",
    "last_token_rewards": "token_rewards",
    # .stats
    "RunningMoments": "stats",
    "explained_variance": "stats",
    "masked_mean": "stats",
    "masked_sum": "stats",
    "masked_var": "stats",
    "masked_whiten": "stats",
}


__getattr__ = lazy_attributes(__name__, _LAZY, globals())


__all__ = [
    "constants",
    # stats
    "masked_sum",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "explained_variance",
    "RunningMoments",
    # log-probs
    "logprobs_from_logits",
    "entropy_from_logits",
    "logprobs_and_entropy_from_logits",
    "logprobs_from_hidden",
    "logprobs_from_hidden_rows",
    # KL
    "kl_penalty",
    "KL_ESTIMATORS",
    "register_kl_estimator",
    "FixedKLController",
    "AdaptiveKLController",
    # training-inference mismatch
    "correct_mismatch",
    "mismatch_metrics",
    "mismatch_ratios",
    "CORRECTION_MODES",
    "CORRECTION_LEVELS",
    "register_correction",
    # rewards
    "clip_rewards",
    "clip_fraction",
    "group_mean_std",
    "normalize_rewards",
    "normalize_rewards_by_domain",
    "NORM_TYPES",
    "difficulty_groups",
    "difficulty_mask",
    "difficulty_weights",
    "group_scores_vary",
    # token rewards
    "last_token_rewards",
    "episode_reward_scale",
    "episode_token_rewards",
    # advantages
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimator",
    "register_advantage",
    "compute_advantages",
    "GROUP_STATS",
    "episode_group_mean_std",
    "leave_episode_out_baseline",
    "gae_advantages",
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_plus_plus_advantages",
    "token_reward_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "opo_advantages",
    "grpo_passk_advantages",
    # losses
    "POLICY_LOSSES",
    "POLICY_LOSS_METRIC_REDUCTIONS",
    "POLICY_LOSS_OPTIONS",
    "POLICY_LOSS_SELECTIONS",
    "register_policy_loss",
    "sapo_policy_loss",
    "kl_cov_policy_loss",
    "clip_cov_policy_loss",
    # token selections
    "masked_quantile",
    "top_count",
    "top_count_threshold",
    "exact_top",
    "high_entropy_mask",
    "token_covariance",
    "kl_cov_select",
    "clip_cov_candidates",
    "random_subset",
    # reward shaping
    "overlong_penalty",
    "normalize_then_sum",
    # on-policy distillation
    "distillation_token_rewards",
    "distillation_metrics",
    "ppo_policy_loss",
    "gspo_policy_loss",
    "cispo_policy_loss",
    "vanilla_pg_loss",
    "value_loss",
    "aggregate_loss",
    "count_tokens_and_seqs",
    "LOSS_AGG_MODES",
]
