"""An episode's processed score placed on its tokens: the token rewards that GAE and REINFORCE++
read, and whose row sums the outcome estimators see.

An episode's raw score ``x`` is the reward functions' score plus the environment's turn rewards;
``r_k`` is the reward of earlier turn ``k`` (on that turn's last policy token), the last turn
holding the rest, ``r_K = x - sum_{k<K} r_k`` (a single turn: ``r_K = x``). The reward pipeline
(seed 001) maps the score::

    c = clip(x, -C, C)                   response-level clip
    s = a * c + b                        normalisation: a = 1 / (std + eps), b = -mean * a
                                         (a = 1 without a std, b = 0 without a mean)
    p = clip(s, -C, C)                   token-level clip of the score: the processed score

and each part of the score goes through the same chain, the clips acting on the episode as a
whole (a clip of ``x`` to ``c`` scales every part by ``c / x``)::

    alpha = (c / x) * a * (p / s)        (a ratio whose denominator is 0 counts as 1)
    token reward at turn k's last token  = alpha * r_k                  (k < K)
    token reward at the last token       = p - alpha * sum_{k<K} r_k    (= alpha * r_K + (p / s) * b)

so every row sums to ``p`` exactly as it does for a single turn, each turn keeps its reward's
sign and its share, and the mean (the baseline) sits on the last token, where a single turn has
it. A row with no valid token is all 0. ``C`` bounds the score, not each turn's share: turn
rewards +5 and -5 with ``C = 1`` stay +5 and -5 (times ``a``), their sum 0 is within the clip.
"""

from __future__ import annotations

import torch

__all__ = ["last_token_rewards", "episode_reward_scale", "episode_token_rewards"]


def last_token_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` zeros in the dtype of ``scores`` with each row's score on its last valid token
    (``mask`` need not be contiguous); a row with no valid token is all 0."""
    keep = mask != 0
    out = torch.zeros(keep.shape, dtype=scores.dtype, device=scores.device)
    lengths = keep.sum(-1)
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    last = (keep.cumsum(-1) == lengths.unsqueeze(-1)) & keep
    index = last.float().argmax(-1)
    out[rows, index[rows]] = scores[rows]
    return out


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den``, and 1 where ``den`` is 0."""
    zero = den == 0
    return torch.where(zero, torch.ones_like(num), num / torch.where(zero, torch.ones_like(den), den))


def episode_reward_scale(raw: torch.Tensor, clipped: torch.Tensor, norm_scale: torch.Tensor,
                         normalized: torch.Tensor, processed: torch.Tensor) -> torch.Tensor:
    """``[B]`` ``alpha = (c / x) * a * (p / s)`` (module docstring): the factor by which the reward
    pipeline scales each part of an episode's score. ``raw`` is ``x``, ``clipped`` ``c``,
    ``norm_scale`` ``a`` (the normalisation's slope, 0 for an invalid sample), ``normalized``
    ``s`` and ``processed`` ``p``. Computed in float64."""
    x, c, a, s, p = (t.double() for t in (raw, clipped, norm_scale, normalized, processed))
    return _ratio(c, x) * a * _ratio(p, s)


def episode_token_rewards(processed: torch.Tensor, scale: torch.Tensor, turn_rewards: torch.Tensor | None,
                          mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` float64 token rewards whose rows sum to ``processed [B]`` (module docstring):
    ``scale * turn_rewards`` where earlier turns' rewards sit (``turn_rewards [B, T]``: each earlier
    turn's reward on its last token, 0 elsewhere; None for single turns), the rest of the score on
    each row's last valid token. Turn rewards on masked tokens are ignored."""
    p = processed.double()
    out = last_token_rewards(p, mask)
    if turn_rewards is None:
        return out
    keep = mask != 0
    zero = torch.zeros((), dtype=torch.float64, device=p.device)
    earlier = torch.where(keep, scale.double().unsqueeze(-1) * torch.where(keep, turn_rewards.double(), zero), zero)
    return out + earlier - last_token_rewards(earlier.sum(-1), mask)
