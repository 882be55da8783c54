"""Which groups carry a signal, decided exactly: :func:`group_scores_vary` (dynamic sampling's
``equal_scores`` filter) and :func:`difficulty_groups` (the difficulty mask and dynamic sampling's
``difficulty`` filter), against an oracle in exact rationals (:class:`fractions.Fraction`).

A float mean ``sum / n`` does not round back: three 0.1s have mean 0.10000000000000002, so a group
of equal scores looked informative and a group mean on a threshold fell on either side of it.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional import difficulty_groups, difficulty_mask, grpo_advantages, group_scores_vary

torch.set_num_threads(1)


def oracle_vary(scores: list[float], valid: list[bool], n: int) -> list[bool]:
    out = []
    for g in range(len(scores) // n):
        values = {Fraction(s) for s, ok in zip(scores[g * n:(g + 1) * n], valid[g * n:(g + 1) * n]) if ok}
        count = sum(valid[g * n:(g + 1) * n])
        out.append(count >= 2 and len(values) > 1)
    return out


def oracle_difficulty(scores: list[float], valid: list[bool], n: int, low: float, high: float) -> list[bool]:
    out = []
    for g in range(len(scores) // n):
        values = [Fraction(s) for s, ok in zip(scores[g * n:(g + 1) * n], valid[g * n:(g + 1) * n]) if ok]
        if n == 1:
            out.append(True)
            continue
        mean = sum(values) / len(values) if values else None
        out.append(mean is not None and Fraction(low) < mean < Fraction(high))
    return out


@pytest.mark.parametrize("n", [3, 6, 7, 12])
def test_groups_of_equal_scores_in_steps_of_0_05_carry_no_signal(n):
    """The reviewers' cases: every group of equal scores k * 0.05 has GRPO advantage exactly 0,
    and the filter says so for every k (a float mean kept some of them)."""
    scores = torch.tensor([k * 0.05 for k in range(21) for _ in range(n)], dtype=torch.float64)
    mask = torch.ones(scores.shape[0], 2, dtype=torch.long)
    assert torch.equal(grpo_advantages(scores, mask, n), torch.zeros(scores.shape[0], 2, dtype=torch.float64))
    assert not group_scores_vary(scores, n).any()
    # and one different score in a group is found, however small the difference
    scores[0] = torch.nextafter(scores[0], torch.tensor(1.0, dtype=torch.float64))
    assert group_scores_vary(scores, n).tolist() == [True] + [False] * 20


def test_three_tenths_are_one_score():
    assert not bool(group_scores_vary(torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64), 3))


def test_a_group_mean_on_a_threshold_is_out_whatever_its_rounding():
    """Three 0.1s have exact mean 0.1 (their float mean is above it), seven 0.95s exactly 0.95;
    [0.05, 0.15] and [0.9, 1.0] are a double's hair off a threshold: the exact mean decides."""
    for scores, n in [([0.1, 0.1, 0.1], 3), ([0.05, 0.15], 2), ([0.95] * 7, 7), ([0.9, 1.0], 2)]:
        x = torch.tensor(scores, dtype=torch.float64)
        expected = oracle_difficulty(scores, [True] * n, n, 0.1, 0.95)
        assert difficulty_groups(x, n).tolist() == expected, scores
        assert difficulty_mask(x, n).tolist() == [expected[0]] * n


scores_strategy = st.one_of(
    st.sampled_from([0.0, 0.05, 0.1, 0.15, 0.3, 0.9, 0.95, 1.0]),  # steps of 0.05: means on thresholds
    st.sampled_from([1.7e308, -1.7e308, 1e-300, -5e-324, 2.0**-1074]),  # sums beyond the float range, subnormals
    st.floats(-10, 10, allow_nan=False),
)


@settings(max_examples=300, deadline=None)
@given(n=st.sampled_from([1, 2, 3, 6, 7]), groups=st.integers(1, 4), data=st.data(),
       low=st.sampled_from([0.1, 0.0, -1.0, 0.3]), high=st.sampled_from([0.95, 1.0, 0.15, 0.3000000000000001]),
       dtype=st.sampled_from([torch.float64, torch.float32]))
def test_group_filters_match_the_exact_rational_oracle(n, groups, data, low, high, dtype):
    """Hostile groups: equal scores, means exactly on a threshold, partial sums that overflow a
    double, subnormals, float32 scores (the thresholds are read in float32 then), and invalid
    samples holding NaN or inf that must not count."""
    if not low < high:
        return
    b = n * groups
    raw = data.draw(st.lists(scores_strategy, min_size=b, max_size=b))
    valid = data.draw(st.lists(st.booleans(), min_size=b, max_size=b))
    x = torch.tensor(raw, dtype=torch.float64).to(dtype)
    if dtype == torch.float32 and not torch.isfinite(x).all():
        return  # 1.7e308 is not a float32
    junk = torch.tensor([float("nan") if i % 2 else float("inf") for i in range(b)], dtype=dtype)
    scores = torch.where(torch.tensor(valid), x, junk)
    given_values = x.double().tolist()  # the scores as given (float32 ones widened exactly)
    lo, hi = (float(torch.tensor(v, dtype=dtype)) for v in (low, high))
    mask = torch.tensor(valid)
    assert group_scores_vary(scores, n, mask).tolist() == oracle_vary(given_values, valid, n)
    expected = oracle_difficulty(given_values, valid, n, lo, hi)
    assert difficulty_groups(scores, n, low, high, mask).tolist() == expected
    assert difficulty_mask(scores, n, low, high, mask).tolist() == [k for k in expected for _ in range(n)]
