"""``eval.*``: the held-out evaluation.

Part of the typed configuration (:mod:`steadyrl.config.schema` re-exports every section).
"""

from __future__ import annotations




from .base import F, MAX_SAMPLES, MAX_TOKENS, Section


class EvalConfig(Section):
    num_samples: int = F(4, "Sampled completions per prompt for pass@k (0 = greedy only).", ge=0, le=MAX_SAMPLES)
    temperature: float = F(1.0, "Sampling temperature of the pass@k samples.", gt=0)
    max_new_tokens: int | None = F(None, "null = rollout.max_new_tokens.", ge=1, le=MAX_TOKENS)
    accuracy_reward: str | None = F(None, "Reward whose score decides correctness; null = the first.")
    correct_threshold: float = F(1.0, "A completion is correct when that reward is >= this.")
    batch_size: int = F(64, "Prompts per generate call during evaluation.", ge=1, le=MAX_SAMPLES)
