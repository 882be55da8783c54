"""On-policy distillation (OPD): a teacher's log-probs of the student's own samples as a per-token reward.

The student samples a response; a frozen teacher scores the sampled tokens; the per-token
estimate of the reverse KL ``KL(pi_student || pi_teacher)`` at the sampled token ``y_t`` (the k1
estimator of the sampled token, Agarwal et al., "On-Policy Distillation of Language Models: Learning
from Self-Generated Mistakes", arXiv 2306.13649 (GKD); Thinking Machines' "On-Policy Distillation",
2025) is a negative reward on that token::

    d_t = clamp(log pi_student(y_t) - log pi_teacher(y_t), -40, 40)
    token_reward_t = -coef * d_t       on the policy's own tokens, 0 elsewhere

The clamp is seed 002's (the same as before any KL estimator). Observation tokens of a multi-turn
episode (``policy_mask`` 0) and padding get exactly 0, whatever the log-probs there hold (NaN or
inf included): the teacher is only asked about what the student chose.

Pure functions of tensors: float64 for float64 input, float32 otherwise (bf16 and fp16 inputs are
widened before the subtraction).
"""

from __future__ import annotations

import torch

from .constants import LOGPROB_DIFF_CLAMP, MASK_EPS

__all__ = ["distillation_token_rewards", "distillation_metrics"]


def _wide(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def distillation_token_rewards(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor,
                               policy_mask: torch.Tensor, coef: float = 1.0,
                               clamp: float = LOGPROB_DIFF_CLAMP) -> torch.Tensor:
    """``-coef * clamp(student - teacher, -clamp, clamp)`` on ``policy_mask``'s tokens, 0 elsewhere, ``[B, T]``.

    ``student_logprobs`` are the rollout policy's (the ``old`` pass) log-probs of the sampled
    tokens, ``teacher_logprobs`` the teacher's of the same tokens. Not finite differences on
    policy tokens (a NaN teacher log-prob where the mask says 1) stay NaN: that is a broken
    teacher, and reward processing must see it rather than a silent 0.
    """
    if coef < 0:
        raise ValueError(f"distillation coef must be >= 0, got {coef}")
    if clamp <= 0:
        raise ValueError(f"clamp must be > 0, got {clamp}")
    if student_logprobs.shape != teacher_logprobs.shape or student_logprobs.shape != policy_mask.shape:
        raise ValueError(f"shapes differ: student {tuple(student_logprobs.shape)}, teacher "
                         f"{tuple(teacher_logprobs.shape)}, policy_mask {tuple(policy_mask.shape)}")
    dtype = _wide(student_logprobs)
    mask = policy_mask.bool()
    zero = torch.zeros((), dtype=dtype)
    lowest = torch.finfo(dtype).min  # a -inf log-prob (fp16 overflow, a zero probability) is the lowest finite one
    s = torch.where(mask, student_logprobs.to(dtype).clamp(min=lowest), zero)  # padding's NaN enters no op
    t = torch.where(mask, teacher_logprobs.to(dtype).clamp(min=lowest), zero)
    d = (s - t).clamp(-clamp, clamp)
    return torch.where(mask, -coef * d, zero)


def distillation_metrics(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor,
                         policy_mask: torch.Tensor, clamp: float = LOGPROB_DIFF_CLAMP) -> dict[str, float]:
    """``distill/reverse_kl`` (the mean clamped k1 estimate per policy token) and
    ``distill/teacher_logprob_mean`` (the teacher's mean log-prob of the policy's tokens); 0 for no token."""
    mask = policy_mask.bool()
    zero = torch.zeros((), dtype=torch.float64)
    lowest = torch.finfo(torch.float32).min
    s = torch.where(mask, student_logprobs.double().clamp(min=lowest), zero)
    t = torch.where(mask, teacher_logprobs.double().clamp(min=lowest), zero)
    n = mask.sum() + MASK_EPS
    return {"distill/reverse_kl": float((s - t).clamp(-clamp, clamp).sum() / n),
            "distill/teacher_logprob_mean": float(t.sum() / n)}
