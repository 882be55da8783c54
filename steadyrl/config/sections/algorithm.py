"""``algorithm.*``: advantage estimator, policy loss, clipping, KL, reward processing, selection and
shaping; the names of each choice (the config's torch-free view of the registries).

Part of the typed configuration (:mod:`steadyrl.config.schema` re-exports every section).
"""

from __future__ import annotations


from typing import Literal

from pydantic import model_validator

from ...functional.constants import (
    DIFFICULTY_HIGH,
    DIFFICULTY_LOW,
    GAE_LAMBDA,
    GAMMA,
    CLIP_COV_LB,
    CLIP_COV_RATIO,
    CLIP_COV_UB,
    KL_COV_COEF,
    KL_COV_RATIO,
    OVERLONG_PENALTY_FACTOR,
    PG_CLIP,
    SAPO_TAU_NEG,
    SAPO_TAU_POS,
    dual_clip_default,
)
from .base import F, MAX_TOKENS, Section


NormType = Literal["batch", "group", "running", "none"]
GROUPED_BY_ESTIMATOR = {"grpo": True, "gae": False, "rloo": True, "reinforce_plus_plus": False,
                        "reinforce_plus_plus_baseline": True, "opo": True, "grpo_passk": True,
                        "token_reward": False}
"""The config's torch-free view of :data:`steadyrl.functional.ADVANTAGE_ESTIMATORS`: each
estimator's name (the choices of ``algorithm.advantage_estimator``) and whether it compares a
prompt's responses with each other (``grouped`` at its registration). Loading a config must not
import torch, which the registry does; a test keeps the two equal."""
AdvantageName = Literal[tuple(GROUPED_BY_ESTIMATOR)]
PolicyLossName = Literal["ppo", "gspo", "cispo", "vanilla_pg", "sapo", "kl_cov", "clip_cov"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3", "abs"]
PresetName = Literal["grpo", "dr_grpo", "ppo", "rloo", "reinforce_plus_plus", "gspo", "cispo"]


class AlgorithmConfig(Section):
    preset: PresetName = F("grpo", "Named set of defaults for this section: grpo, dr_grpo, ppo, rloo, "
                           "reinforce_plus_plus, gspo, cispo. Keys you set yourself always win.")
    advantage_estimator: AdvantageName = F("grpo", "Advantage estimator (see steadyrl.functional.advantages).")
    norm_by_std: bool = F(True, "GRPO / pass@k: divide by the group std (false = Dr. GRPO).")
    group_stats: Literal["episode", "sample"] = F(
        "episode", "How a multi-turn episode trained as several samples (rollout.multi_turn.mode: stepwise, or "
        "a gateway agent's several trajectories) counts in its group's statistics (grpo's mean and std, rloo's "
        "and reinforce_plus_plus_baseline's baseline): episode = once (its reward is one outcome; as SkyRL and "
        "prime-rl), sample = once per turn sample (an episode of t turns t times: the default until this key "
        "existed). RLOO leaves the sample's whole episode out of its baseline either way. Runs with one sample "
        "per episode: no difference.")
    policy_loss: PolicyLossName = F("ppo", "Policy loss: ppo (clipped surrogate), gspo, cispo, vanilla_pg, "
                                    "sapo (soft sigmoid gate, sapo_tau_*), kl_cov / clip_cov (covariance-selected "
                                    "tokens, kl_cov_* / clip_cov_*; docs/algorithms.md).")
    loss_agg_mode: LossAggMode = F("token-mean", "How per-token losses become one scalar.")
    norm_length: int | None = F(None, "Constant length of seq-mean-token-sum-norm; null = "
                                "rollout.max_new_tokens, one turn's budget: in multi-turn runs set it (e.g. to "
                                "rollout.multi_turn.max_episode_tokens) for a constant per episode.",
                                ge=1, le=MAX_TOKENS)
    pg_clip: float = F(PG_CLIP, "PPO clip range: the ratio is kept in [1 - clip, 1 + clip]; at most 1 "
                       "(a larger clip would make the lower bound negative).", ge=0, le=1)
    pg_clip_low: float | None = F(None, "Lower clip range (asymmetric), at most 1 (1 = no lower bound, as "
                                  "in the cispo preset); null = pg_clip.", ge=0, le=1)
    pg_clip_high: float | None = F(None, "Upper clip range (clip-higher); null = pg_clip.", ge=0)
    dual_clip: bool = F(False, "Dual clip for negative advantages: loss bounded by -c * A.")
    dual_clip_c: float | None = F(None, "Dual-clip constant c; null = 1 + 2 * pg_clip (ROLL's PPO defaults).", gt=1)
    sapo_tau_pos: float = F(SAPO_TAU_POS, "SAPO gate temperature where the advantage is positive "
                            "(arXiv 2511.20347): larger = a steeper gate, off-policy tokens fade sooner.", gt=0)
    sapo_tau_neg: float = F(SAPO_TAU_NEG, "SAPO gate temperature where the advantage is negative.", gt=0)
    kl_cov_ratio: float = F(KL_COV_RATIO, "KL-Cov: fraction of the batch's policy tokens, those of largest "
                            "advantage/log-prob covariance, that get the |log r| penalty (arXiv 2505.22617).",
                            gt=0, le=1)
    kl_cov_coef: float = F(KL_COV_COEF, "KL-Cov: coefficient of the |log r| penalty on the selected tokens.", ge=0)
    clip_cov_ratio: float = F(CLIP_COV_RATIO, "Clip-Cov: fraction of the batch's policy tokens whose gradient "
                              "is dropped, drawn among those with clip_cov_lb < covariance < clip_cov_ub.",
                              gt=0, le=1)
    clip_cov_lb: float = F(CLIP_COV_LB, "Clip-Cov: lower covariance bound of the tokens it may draw.")
    clip_cov_ub: float = F(CLIP_COV_UB, "Clip-Cov: upper covariance bound of the tokens it may draw.")
    top_entropy_quantile: float = F(1.0, "High-entropy token selection (arXiv 2506.01939, TRL's "
                                    "top_entropy_quantile): only the policy tokens whose entropy is in the top "
                                    "fraction rho of the whole step's (all micro-batches and ranks) carry the "
                                    "policy gradient; 1 = every token. The paper uses 0.2. Costs the old "
                                    "log-prob pass when the update would otherwise skip it.", gt=0, le=1)
    overlong_buffer: int | None = F(None, "DAPO's soft overlong punishment (arXiv 2503.14476): a linear "
                                    "penalty, 0 at limit - buffer tokens down to -overlong_penalty_factor at the "
                                    "limit, added to the score; null = off. The limit is rollout.max_new_tokens "
                                    "(overlong_scope: turn, each policy turn) or the episode's token limit "
                                    "(episode).", ge=1, le=MAX_TOKENS)
    overlong_penalty_factor: float = F(OVERLONG_PENALTY_FACTOR, "The overlong penalty at the length limit.", ge=0)
    overlong_scope: Literal["episode", "turn"] = F("episode", "What the overlong buffer measures: the whole "
                                                   "episode's policy tokens against its limit, or each policy turn "
                                                   "against rollout.max_new_tokens (penalties summed). The same for "
                                                   "single-turn runs.")
    reward_aggregation: Literal["sum", "normalize_then_sum"] = F(
        "sum", "Several reward functions: sum (the weighted sum is the score, normalised as one) or "
        "normalize_then_sum (GDPO, arXiv 2601.05242; TRL's multi_objective_aggregation): each reward is "
        "normalised within its group, the weighted sum is normalised over the batch and is the advantage. "
        "Needs advantage_estimator grpo and kl_mode loss or none.")
    gamma: float = F(GAMMA, "Discount (GAE, REINFORCE++).", ge=0, le=1)
    lam: float = F(GAE_LAMBDA, "GAE lambda.", ge=0, le=1)
    reward_clip: float | None = F(None, "Clip rewards to [-c, c] at the response and token level "
                                  "(5-10 typical): the episode's score before and after normalisation, and "
                                  "each token's KL penalty (kl_mode: reward); null = off.", gt=0)
    reward_norm_mean: NormType = F("none", "Reward normalisation mean: batch, group, running or none.")
    reward_norm_std: NormType = F("none", "Reward normalisation std: batch, group, running or none.")
    reward_norm_by_domain: bool = F(False, "Normalise rewards within each reward domain (data.domain_key): "
                                    "batch statistics are taken over the domain's samples only, so a domain "
                                    "on a large scale does not swamp the others. Not with 'running'.")
    whiten_advantages: bool = F(False, "Whiten advantages over the batch's valid tokens.")
    advantage_clip: float | None = F(None, "Clip advantages to [-c, c]; null = off.", gt=0)
    kl_mode: Literal["none", "loss", "reward"] = F("loss", "KL to the reference: none, a loss term, "
                                                   "or a per-token penalty in the reward.")
    kl_coef: float = F(0.001, "KL coefficient beta (initial value when adaptive).", ge=0)
    kl_estimator: KLEstimator = F("k3", "KL estimator: k1, k2, k3 (low variance) or abs.")
    kl_target: float | None = F(None, "Target KL of the adaptive controller; null = fixed beta.", gt=0)
    kl_horizon: int = F(10000, "Horizon of the adaptive KL controller.", ge=1)
    entropy_coef: float = F(0.0, "Entropy bonus coefficient.", ge=0)
    difficulty_mask: bool = F(False, "Train only on groups with low < mean score < high.")
    difficulty_low: float = F(DIFFICULTY_LOW, "Difficulty mask lower bound.")
    difficulty_high: float = F(DIFFICULTY_HIGH, "Difficulty mask upper bound.")
    difficulty_weighting: bool = F(False, "Weight samples by group difficulty, in [0.5, 2.0].")
    mask_truncated: bool = F(False, "Leave truncated responses out of the loss (overlong filtering).")
    dynamic_sampling: bool = F(False, "DAPO's filter groups: drop groups without a learning signal and draw "
                               "more prompts until the step has prompts_per_step informative groups.")
    dynamic_sampling_filter: Literal["equal_scores", "difficulty"] = F(
        "equal_scores", "Which groups dynamic sampling drops: equal_scores (all scores equal: GRPO advantage 0) "
        "or difficulty (mean score outside difficulty_low..difficulty_high).")
    dynamic_sampling_max_draws: int = F(3, "Most draws of prompts_per_step prompts in one step; then the step "
                                        "trains on the informative groups it has.", ge=1)
    value_clip: float | None = F(0.5, "PPO value clip range; null = off.", gt=0)

    @property
    def clip_low(self) -> float:
        return self.pg_clip if self.pg_clip_low is None else self.pg_clip_low

    @property
    def clip_high(self) -> float:
        return self.pg_clip if self.pg_clip_high is None else self.pg_clip_high

    @property
    def dual_clip_value(self) -> float | None:
        if not self.dual_clip:
            return None
        return dual_clip_default(self.pg_clip) if self.dual_clip_c is None else self.dual_clip_c

    @model_validator(mode="after")
    def _check(self) -> "AlgorithmConfig":
        if self.reward_norm_by_domain and "running" in (self.reward_norm_mean, self.reward_norm_std):
            raise ValueError("reward_norm_by_domain = true keeps no running statistics per domain: set "
                             "reward_norm_mean / reward_norm_std to batch, group or none")
        if not self.difficulty_low < self.difficulty_high:
            raise ValueError(
                f"difficulty_low ({self.difficulty_low}) must be < difficulty_high ({self.difficulty_high})"
            )
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ValueError(f"clip_cov_lb ({self.clip_cov_lb}) must be < clip_cov_ub ({self.clip_cov_ub})")
        if self.reward_aggregation == "normalize_then_sum":
            if self.advantage_estimator != "grpo":
                raise ValueError(f"reward_aggregation = normalize_then_sum makes the advantage itself (GDPO), "
                                 f"in place of the estimator: set advantage_estimator = grpo, not "
                                 f"{self.advantage_estimator!r}")
            if self.kl_mode == "reward":
                raise ValueError("reward_aggregation = normalize_then_sum has no place for a KL penalty in the "
                                 "reward: set kl_mode to loss or none")
        return self
