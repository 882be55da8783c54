"""steadyrl.functional: the numerically stable tensor math of RL post-training.

Pure functions of tensors: no config objects, no models, no I/O, no global state
(``RunningMoments`` and the KL controllers are the small stateful objects, each with a
``state_dict``). Reductions, ``exp`` and ``log`` run in float32 or wider whatever the input
dtype. Every epsilon and clamp is a named constant in :mod:`steadyrl.functional.constants`.
"""

from . import constants
from .advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    compute_advantages,
    gae_advantages,
    grpo_advantages,
    grpo_passk_advantages,
    opo_advantages,
    register_advantage,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    rloo_advantages,
)
from .aggregation import LOSS_AGG_MODES, aggregate_loss, count_tokens_and_seqs
from .kl import KL_ESTIMATORS, AdaptiveKLController, FixedKLController, kl_penalty, register_kl_estimator
from .logprobs import (
    entropy_from_logits,
    logprobs_and_entropy_from_logits,
    logprobs_from_hidden,
    logprobs_from_logits,
)
from .losses import (
    POLICY_LOSSES,
    cispo_policy_loss,
    gspo_policy_loss,
    ppo_policy_loss,
    register_policy_loss,
    value_loss,
    vanilla_pg_loss,
)
from .rewards import (
    NORM_TYPES,
    clip_fraction,
    clip_rewards,
    difficulty_mask,
    difficulty_weights,
    group_mean_std,
    normalize_rewards,
    normalize_rewards_by_domain,
)
from .stats import RunningMoments, explained_variance, masked_mean, masked_sum, masked_var, masked_whiten

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
    # KL
    "kl_penalty",
    "KL_ESTIMATORS",
    "register_kl_estimator",
    "FixedKLController",
    "AdaptiveKLController",
    # rewards
    "clip_rewards",
    "clip_fraction",
    "group_mean_std",
    "normalize_rewards",
    "normalize_rewards_by_domain",
    "NORM_TYPES",
    "difficulty_mask",
    "difficulty_weights",
    # advantages
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimator",
    "register_advantage",
    "compute_advantages",
    "gae_advantages",
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "opo_advantages",
    "grpo_passk_advantages",
    # losses
    "POLICY_LOSSES",
    "register_policy_loss",
    "ppo_policy_loss",
    "gspo_policy_loss",
    "cispo_policy_loss",
    "vanilla_pg_loss",
    "value_loss",
    "aggregate_loss",
    "count_tokens_and_seqs",
    "LOSS_AGG_MODES",
]
