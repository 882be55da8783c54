"""Reduce a per-token loss ``[B, T]`` to the scalar that is backpropagated.

Modes (``L`` is the loss, ``m`` the response mask, sums over valid tokens only):

=========================== ===================================================================
mode                        scalar
=========================== ===================================================================
token-mean                  ``sum_{b,t} L / N_tokens``
seq-mean-token-sum          ``sum_b (sum_t L) / N_seqs``
seq-mean-token-mean         ``sum_b (sum_t L / n_b) / N_seqs``  (``n_b`` = sequence b's tokens)
seq-mean-token-sum-norm     ``sum_b (sum_t L) / (N_seqs * norm_length)``  (Dr. GRPO; ``norm_length``
                            is a constant such as ``max_new_tokens``, default ``T``)
=========================== ===================================================================

``N_tokens`` and ``N_seqs`` (sequences with at least one valid token) default to this batch's
counts, plus 1e-8 (seed 000). Pass the counts of the *whole step* — all micro-batches and all
data-parallel ranks — as ``global_tokens`` / ``global_seqs``, and the per-micro-batch scalars
simply add up to the whole-batch loss, so the gradient does not depend on how the batch was split.

The numerator is masked with ``torch.where``: whatever sits on padding (even NaN) never enters it.
Optional ``sample_weights [B]`` scale each sequence's terms (difficulty weights, sample masks), and
``token_weights [B, T]`` each token's (a token selection: :mod:`steadyrl.functional.selection`); the
denominators stay the counts of valid tokens and sequences, so dropping a token's gradient does not
rescale the others'.
"""

from __future__ import annotations

from typing import Literal

import torch

from .constants import MASK_EPS
from .stats import acc_dtype

__all__ = ["LossAggMode", "LOSS_AGG_MODES", "aggregate_loss", "count_tokens_and_seqs"]

LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def count_tokens_and_seqs(response_mask: torch.Tensor) -> tuple[int, int]:
    """``(valid tokens, sequences with >= 1 valid token)`` of a mask — the loss denominators."""
    keep = response_mask != 0
    return int(keep.sum()), int(keep.any(-1).sum())


def aggregate_loss(
    loss: torch.Tensor,
    response_mask: torch.Tensor,
    mode: LossAggMode = "token-mean",
    global_tokens: float | None = None,
    global_seqs: float | None = None,
    norm_length: float | None = None,
    sample_weights: torch.Tensor | None = None,
    token_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Aggregate a ``[B, T]`` per-token loss to a scalar (see the module docstring).

    ``token_weights [B, T]`` scale each valid token's term in the numerator only (a token
    selection: 0 drops a token's gradient while it still counts in the denominators)."""
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode {mode!r} is not one of {LOSS_AGG_MODES}")
    if loss.shape != response_mask.shape or loss.dim() != 2:
        raise ValueError(
            f"loss {tuple(loss.shape)} and response_mask {tuple(response_mask.shape)} must both be [B, T]"
        )
    dtype = acc_dtype(loss)
    keep = response_mask != 0
    zero = torch.zeros((), dtype=dtype, device=loss.device)
    per_token = torch.where(keep, loss.to(dtype), zero)
    if sample_weights is not None:
        per_token = per_token * sample_weights.to(dtype).unsqueeze(-1)
    if token_weights is not None:
        per_token = per_token * torch.where(keep, token_weights.to(dtype), zero)

    if mode == "token-mean":
        tokens = keep.sum().to(dtype) if global_tokens is None else global_tokens
        return per_token.sum() / (tokens + MASK_EPS)

    lengths = keep.sum(-1).to(dtype)
    seqs = (lengths > 0).sum().to(dtype) if global_seqs is None else global_seqs
    seq_sums = per_token.sum(-1)
    if mode == "seq-mean-token-sum":
        return seq_sums.sum() / (seqs + MASK_EPS)
    if mode == "seq-mean-token-mean":
        return (seq_sums / (lengths + MASK_EPS)).sum() / (seqs + MASK_EPS)
    length = loss.shape[-1] if norm_length is None else norm_length
    if not length > 0:
        raise ValueError(f"norm_length must be > 0, got {norm_length}")
    return seq_sums.sum() / (seqs * length + MASK_EPS)
