"""The teacher's pass of on-policy distillation: its log-probs of the student's sampled tokens.

The same chunked log-prob path as the reference (:func:`~steadyrl.trainer.forward.response_logprobs`:
the teacher's ``[B, R, V]`` logits never exist), in inference mode, micro-batch by micro-batch, on
the teacher's own device (``teacher.device``), returned on the CPU in float32 beside ``ref_logprobs``.
Reward processing turns them into token rewards (:func:`steadyrl.functional.distillation_token_rewards`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from .forward import response_logprobs

if TYPE_CHECKING:
    from .parts import RunModels


def teacher_logprobs(models: RunModels, batch, per_token: Callable, kwargs: dict) -> torch.Tensor | None:
    """``[B, R]`` float32: the teacher's log-probs of ``batch``'s response tokens, or None without a teacher.

    ``per_token(fn, device)`` runs ``fn`` over the batch's micro-batches moved to ``device``
    (the step's :func:`~steadyrl.trainer.step._per_token`); ``kwargs`` are the step's log-prob options
    (temperature, implementation, chunk size, prefix sharing, padding-free)."""
    teacher = models.teacher
    if teacher is None:
        return None
    device = next(teacher.parameters()).device
    with torch.inference_mode():
        logprobs = per_token(lambda m: response_logprobs(teacher, m, **kwargs)[0], device)
    return logprobs.clone()  # an ordinary tensor: later steps may write into their copies
