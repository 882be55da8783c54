"""Every epsilon, clamp and default of the functional core, in one place, with the note it comes from.

The seed notes live in ``shared/seeds/``; the tag after each constant names the one it comes from:

* seed 000 — ROLL's epsilon hierarchy (masked ops, reward normalisation, divergences, running stats).
* seed 001 — ROLL's reward pipeline (clips, normalisation, difficulty mask and weights).
* seed 002 — open-instruct's log-prob difference clamp before any KL estimator.
* seed 003 — ROLL's PPO defaults (clip range, dual clip, GAE, gradient norm).

Constants without a seed tag are steadyrl's own choices; the reason is given beside each.
"""

# --- seed 000: the epsilon hierarchy -------------------------------------------------------------
MASK_EPS = 1e-8
"""Denominator epsilon of masked means and of loss aggregation: ``sum / (count + 1e-8)``."""

WHITEN_EPS = 1e-8
"""Variance epsilon of whitening: ``(x - mean) * rsqrt(var + 1e-8)``."""

NORM_EPS = 1e-6
"""Std epsilon of reward and advantage normalisation: ``(r - mean) / (std + 1e-6)``."""

RUNNING_COUNT_INIT = 1e-24
"""Initial count of running statistics, so the first update never divides by zero."""

K3_VALUE_CLAMP = 10.0
"""The k3 KL value is clamped to ``[-10, 10]``."""

# --- seed 002: log-prob differences --------------------------------------------------------------
LOGPROB_DIFF_CLAMP = 40.0
"""``logprobs - ref_logprobs`` is clamped to ``[-40, 40]`` before any KL estimator."""

# --- steadyrl: importance ratios -----------------------------------------------------------------
LOG_RATIO_CLAMP = 20.0
"""``logprobs - old_logprobs`` is clamped to ``[-20, 20]`` before ``exp`` (as verl does): the ratio
stays below ~4.9e8, finite in float32 with room for the product with an advantage. Beyond the clamp
a token has zero gradient (the clamp's derivative is 0 there). The clip alone would not always have
done that: with ``A > 0`` and ``r > 1 + clip_high`` (or ``A < 0`` and ``r < 1 - clip_low``) the
clipped branch is active and the token has no gradient anyway, but with ``A < 0``, ``r`` far above
``1 + clip_high`` and no dual clip, PPO's pessimistic ``max(-r A, -clip(r) A)`` takes the unclipped
branch ``-r A``, which grows with ``r``: there the clamp is what bounds the loss (at ``-e^20 A``),
with zero gradient. A dual clip bounds that branch at ``-c A`` first."""

TIS_LOG_RATIO_CLAMP = 10.0
"""Truncated importance sampling: ``logp_train - logp_rollout`` is clamped to ``[-10, 10]`` before
``exp``, then the weight is capped (``rollout.tis_cap``); ``exp(10)`` is finite in float32."""

# --- seed 001: reward pipeline --------------------------------------------------------------------
DIFFICULTY_LOW = 0.1
"""A group is kept by the difficulty mask when ``DIFFICULTY_LOW < group mean``."""

DIFFICULTY_HIGH = 0.95
"""... and ``group mean < DIFFICULTY_HIGH``."""

DIFFICULTY_WEIGHT_MIN = 0.5
"""Weight of the easiest group (accuracy 1) in difficulty weighting."""

DIFFICULTY_WEIGHT_MAX = 2.0
"""Weight of the hardest group (accuracy 0) in difficulty weighting."""

# --- seed 003: PPO defaults -----------------------------------------------------------------------
PG_CLIP = 0.2
"""PPO clip range: the ratio is clipped to ``[1 - 0.2, 1 + 0.2]``; low and high may differ."""

GAE_LAMBDA = 0.95
"""GAE lambda."""

GAMMA = 1.0
"""Discount: 1.0, since a response is one episode."""

MAX_GRAD_NORM = 1.0
"""Gradient-norm clip."""


def dual_clip_default(clip: float = PG_CLIP) -> float:
    """Seed 003's dual-clip constant ``c = 1 + 2 * clip``: 1.4 for the default clip of 0.2."""
    return 1.0 + 2.0 * clip


# --- steadyrl: KL controller ----------------------------------------------------------------------
KL_CTL_PROPORTIONAL_CLIP = 0.2
"""The adaptive KL controller's proportional error is clipped to ``[-0.2, 0.2]`` (Ziegler et al.)."""


# --- steadyrl: training-inference mismatch (functional/mismatch.py) --------------------------------
SEQ_LOG_RATIO_CLAMP = 20.0
"""A sequence's log importance ratio ``sum_t (logp_train - logp_rollout)`` is clamped to ``[-20, 20]``
before ``exp``: ``exp(20)`` (~4.9e8) is finite in float32, the same bound as :data:`LOG_RATIO_CLAMP`.
The clamp is applied to the sum of the raw differences, not to each token's (as verl): a sequence of
true ratio ``e^-30`` is not the ``e^0`` of two clamped tokens ``+40, -40``."""

LOGPROB_SUM_BOUND = 1e150
"""Before a sequence's raw log-ratios are summed (in float64), each log-prob is clamped to
``[-1e150, 1e150]``: a float64 input of ``+-1.8e308`` would make the difference, then the sum, inf.
No log-prob a model gives comes near it; float32, bfloat16 and fp16 values are never changed by it."""

PPL_LOG_CLAMP = 40.0
"""A sequence's mean negative log-prob is clamped to ``[-40, 40]`` before ``exp`` gives its
perplexity (``exp(40)`` ~2.4e17, finite in float32): a mean beyond 40 nats per token is a broken
log-prob, not a perplexity worth resolving. The bound matches seed 002's difference clamp."""


# --- steadyrl: the newer losses and token selections (functional/losses.py, functional/selection.py) --
SAPO_TAU_POS = 1.0
"""SAPO's gate temperature for tokens with a positive advantage (arXiv 2511.20347; TRL's and verl's
default)."""

SAPO_TAU_NEG = 1.05
"""SAPO's gate temperature for tokens with a negative advantage: a little steeper, so a bad token's
off-policy update fades sooner (the paper's default)."""

KL_COV_RATIO = 2e-4
"""KL-Cov: the fraction of a batch's policy tokens, those of largest covariance between advantage and
log-prob, that get the ``|log r|`` penalty (arXiv 2505.22617; verl's ``kl_cov_ratio``)."""

KL_COV_COEF = 1.0
"""KL-Cov's penalty coefficient on the selected tokens (verl's ``ppo_kl_coef``)."""

CLIP_COV_RATIO = 2e-4
"""Clip-Cov: the fraction of a batch's policy tokens whose gradient is dropped, drawn at random among
those whose covariance lies in ``(CLIP_COV_LB, CLIP_COV_UB)`` (verl's ``clip_cov_ratio``)."""

CLIP_COV_LB = 1.0
"""Clip-Cov's lower covariance bound (verl's ``clip_cov_lb``)."""

CLIP_COV_UB = 5.0
"""Clip-Cov's upper covariance bound (verl's ``clip_cov_ub``)."""

OVERLONG_PENALTY_FACTOR = 1.0
"""DAPO's soft overlong punishment reaches ``-1 * factor`` at the length limit (arXiv 2503.14476)."""
