"""An episode's processed score on its tokens (:mod:`steadyrl.functional.token_rewards`) against a
float64 oracle written as loops: the clip and normalisation chain, the scale of earlier turns'
rewards, every row summing to its processed score; and the slope ``normalize_rewards`` reports."""

from __future__ import annotations

import itertools

import pytest
import torch

from steadyrl.functional import (
    NORM_TYPES,
    RunningMoments,
    clip_rewards,
    episode_reward_scale,
    episode_token_rewards,
    last_token_rewards,
    normalize_rewards,
    normalize_rewards_by_domain,
)

torch.set_num_threads(1)


def oracle_rows(x, turns, lengths, clip, a, b):
    """Loops in Python floats: ``turns[i]`` maps a token index to an earlier turn's reward."""
    out = []
    for x_i, r, n, a_i, b_i in zip(x, turns, lengths, a, b):
        row = [0.0] * 6
        if n == 0:
            out.append(row)
            continue
        c = x_i if clip is None else min(max(x_i, -clip), clip)
        s = a_i * c + b_i
        p = s if clip is None else min(max(s, -clip), clip)
        alpha = (c / x_i if x_i != 0 else 1.0) * a_i * (p / s if s != 0 else 1.0)
        for t, reward in r.items():
            if t < n:
                row[t] = alpha * reward
        row[n - 1] += p - sum(alpha * reward for t, reward in r.items() if t < n)
        out.append(row)
    return out


@pytest.mark.parametrize("clip", [None, 1.0, 0.3])
def test_rows_match_the_oracle_and_sum_to_the_processed_score(clip):
    x = [3.0, 0.0, -5.0, 0.5, 2.0, 1e-3]
    turns = [{0: 3.0}, {1: 5.0, 3: -5.0}, {2: -1.0}, {}, {0: 1.0, 1: 1.0}, {4: 2.0}]
    lengths = [6, 5, 4, 6, 0, 3]  # row 4 has no valid token; row 5's turn reward sits on padding
    a = [0.5, 0.5, 0.5, 0.5, 0.5, 2.0]
    b = [-0.1, -0.1, -0.1, -0.1, -0.1, 0.3]
    raw = torch.tensor(x, dtype=torch.float64)
    clipped = clip_rewards(raw, clip)
    slope, shift = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    s = slope * clipped + shift
    p = clip_rewards(s, clip)
    mask = torch.arange(6).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    turn_rewards = torch.zeros(6, 6, dtype=torch.float64)
    for i, r in enumerate(turns):
        for t, reward in r.items():
            turn_rewards[i, t] = reward
    alpha = episode_reward_scale(raw, clipped, slope, s, p)
    out = episode_token_rewards(p, alpha, turn_rewards, mask)
    expected = torch.tensor(oracle_rows(x, turns, lengths, clip, a, b), dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.sum(-1), torch.where(mask.any(-1), p, torch.zeros(())), rtol=1e-12, atol=1e-12)
    # a single turn: the processed score on the last token, nothing else
    torch.testing.assert_close(episode_token_rewards(p, alpha, None, mask), last_token_rewards(p, mask))


def test_last_token_rewards_put_each_score_on_the_last_valid_token():
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    out = last_token_rewards(torch.tensor([2.0, -1.0, 5.0], dtype=torch.float64), mask)
    assert out.tolist() == [[0, 2.0, 0, 0], [0, 0, -1.0, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize("mean_type,std_type", list(itertools.product(NORM_TYPES, NORM_TYPES)))
def test_normalize_rewards_reports_its_slope(mean_type, std_type):
    """out = slope * x + shift with one slope per group (or batch): the slope is the map's
    derivative, and the output is the same with or without asking for it."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(12, generator=g, dtype=torch.float64) * 4
    mask = torch.ones(12, dtype=torch.bool)
    mask[5] = False
    out, slope = normalize_rewards(x, 4, mean_type, std_type, running=RunningMoments(), mask=mask, return_scale=True)
    assert torch.equal(out, normalize_rewards(x, 4, mean_type, std_type, running=RunningMoments(), mask=mask))
    assert slope[5] == 0 and out[5] == 0
    if std_type == "none":
        assert torch.equal(slope[mask], torch.ones(11, dtype=torch.float64))
    for g0 in range(0, 12, 4):  # within a group the mean is one shift: differences scale by the slope
        rows = [i for i in range(g0, g0 + 4) if mask[i]]
        for i, j in zip(rows, rows[1:]):
            assert (out[i] - out[j]).item() == pytest.approx((slope[i] * (x[i] - x[j])).item(), rel=1e-9)
    domains = torch.tensor([0] * 8 + [1] * 4)
    if "running" not in (mean_type, std_type):
        d_out, d_slope = normalize_rewards_by_domain(x, domains, 4, mean_type, std_type, mask=mask, return_scale=True)
        assert torch.equal(d_out, normalize_rewards_by_domain(x, domains, 4, mean_type, std_type, mask=mask))
        for d in (0, 1):
            rows = mask & (domains == d)
            _, alone = normalize_rewards(x, 4, mean_type, std_type, mask=rows, return_scale=True)
            assert torch.equal(d_slope[rows], alone[rows])
