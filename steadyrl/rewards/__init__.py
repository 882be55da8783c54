"""steadyrl.rewards: reward functions (verifiers), the registry that loads user callables, and
batch scoring with time limits.

A reward function follows steadyrl's convention,
``fn(prompts, completions, **columns) -> list[float | None]``, or TRL's (everything by keyword,
``completion_ids`` included): :mod:`steadyrl.rewards.calling` tells them apart by signature.
Built-ins by name (``math``, ``exact_match``, ``normalized_match``, ``regex_format``,
``length_penalty``; ``code``, which runs the completion's program against the row's tests; and,
scoring with a model or a server, ``reward_model``, ``llm_judge``, ``http``) are factories in
:data:`BUILTIN_REWARDS`; :func:`load_reward` also takes ``package.module:function`` and
``path/to/file.py:function``. :class:`RewardScorer` / :func:`score_batch` call each function on
chunks of the batch (one sample each by default) under a time limit per batch, in a contained
worker process (:mod:`steadyrl.sandbox`) by default, and turn every failure into an invalid
sample, never an exception. See ``docs/rewards.md``.
"""

from ..lazy import lazy_attributes
from . import code, judge, math_verifier, reasoning_gym, remote, reward_model, verifiers  # noqa: F401  (registers the built-ins)
from .loader import load_reward, reward_name
from .math_verifier import math_reward, parse_gold
from .registry import BUILTIN_REWARDS, RewardFactory, RewardFn, register_reward
from .runners import ISOLATIONS, Isolation, default_isolation
from .verifiers import (
    exact_match,
    extract_answer,
    length_penalty,
    normalize_answer,
    normalized_match,
    regex_format,
)

# Batch scoring holds its results in tensors: imported on first use, so that the config layer
# (which reads reward names through .loader, and so runs this file) does not import torch.
_LAZY = {
    "DEFAULT_TIMEOUT_S": "scoring",
    "FAILURE_KINDS": "scoring",
    "RewardScorer": "scoring",
    "RewardSpec": "scoring",
    "ScoreResult": "scoring",
    "score_batch": "scoring",
    "reward_metrics": "metrics",
}


__getattr__ = lazy_attributes(__name__, _LAZY, globals())


__all__ = [
    "BUILTIN_REWARDS",
    "DEFAULT_TIMEOUT_S",
    "FAILURE_KINDS",
    "ISOLATIONS",
    "Isolation",
    "RewardFactory",
    "RewardFn",
    "RewardScorer",
    "RewardSpec",
    "ScoreResult",
    "default_isolation",
    "exact_match",
    "extract_answer",
    "length_penalty",
    "load_reward",
    "math_reward",
    "normalize_answer",
    "normalized_match",
    "parse_gold",
    "regex_format",
    "register_reward",
    "reward_metrics",
    "reward_name",
    "score_batch",
]
