"""DAPO's soft overlong punishment and GDPO's normalise-then-sum against float64 oracles written
from the papers' formulas (arXiv 2503.14476 eq. 13; arXiv 2601.05242), and on hostile inputs."""

import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional import normalize_then_sum, overlong_penalty


def dapo(length, l_max, buf, factor):
    if length <= l_max - buf:
        return 0.0
    if length <= l_max:
        return factor * ((l_max - buf) - length) / buf
    return -factor


@pytest.mark.parametrize("l_max,buf,factor", [(20, 5, 1.0), (20, 20, 0.5), (100, 1, 2.0)])
def test_overlong_penalty_matches_dapos_formula(l_max, buf, factor):
    lengths = torch.arange(0, l_max + 4)
    got = overlong_penalty(lengths, l_max, buf, factor)
    expected = [dapo(int(n), l_max, buf, factor) for n in lengths]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float32), rtol=1e-6, atol=1e-7)
    assert got[l_max].item() == pytest.approx(-factor)  # at the limit: the whole penalty


def test_overlong_penalty_takes_a_limit_per_sample():
    """A multi-turn turn is judged against its own budget."""
    got = overlong_penalty(torch.tensor([8, 8, 30]), torch.tensor([10, 20, 30]), 4)
    torch.testing.assert_close(got, torch.tensor([-0.5, 0.0, -1.0]))


def test_overlong_penalty_refuses_a_buffer_it_cannot_use():
    with pytest.raises(ValueError, match="buffer must be >= 1"):
        overlong_penalty(torch.tensor([3]), 10, 0)
    with pytest.raises(ValueError, match="must not exceed the length limit"):
        overlong_penalty(torch.tensor([3]), 10, 11)
    with pytest.raises(ValueError, match="factor must be >= 0"):
        overlong_penalty(torch.tensor([3]), 10, 2, -1.0)


def gdpo_oracle(components, group_size, weights, valid, eps=1e-6, batch_normalize=True):
    b, k = len(components), len(components[0])
    per = [[0.0] * k for _ in range(b)]
    for j in range(k):
        for g in range(0, b, group_size):
            rows = [i for i in range(g, g + group_size) if valid[i][j]]
            vals = [components[i][j] for i in rows]
            mean = math.fsum(vals) / len(vals) if vals else 0.0
            std = statistics.stdev(vals) if len(vals) > 1 else 0.0
            for i in rows:
                per[i][j] = (components[i][j] - mean) / (std + eps)
    total = [math.fsum(weights[j] * per[i][j] for j in range(k)) for i in range(b)]
    any_valid = [any(valid[i]) for i in range(b)]
    if batch_normalize:
        vals = [total[i] for i in range(b) if any_valid[i]]
        mean = math.fsum(vals) / len(vals) if vals else 0.0
        std = statistics.stdev(vals) if len(vals) > 1 else 0.0
        total = [(t - mean) / (std + eps) for t in total]
    return [t if any_valid[i] else 0.0 for i, t in enumerate(total)], per


@pytest.mark.parametrize("batch_normalize", [True, False])
@pytest.mark.parametrize("group_size", [1, 3, 4])
def test_normalize_then_sum_matches_the_gdpo_oracle(group_size, batch_normalize):
    g = torch.Generator().manual_seed(group_size)
    b = group_size * 4
    comps = torch.stack([torch.randint(0, 2, (b,), generator=g).double(),  # a 0/1 correctness reward
                         torch.randn(b, generator=g, dtype=torch.float64) * 100,  # a large-scale one
                         torch.full((b,), 0.5, dtype=torch.float64)], dim=1)  # one that never varies
    valid = torch.rand(b, 3, generator=g) < 0.85
    weights = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    got, per = normalize_then_sum(comps, group_size, weights, valid, batch_normalize=batch_normalize)
    exp, exp_per = gdpo_oracle(comps.tolist(), group_size, weights.tolist(), valid.tolist(),
                               batch_normalize=batch_normalize)
    torch.testing.assert_close(got, torch.tensor(exp, dtype=torch.float64), rtol=1e-7, atol=1e-8)  # masked stats divide by n + 1e-8 (seed 000)
    torch.testing.assert_close(per, torch.tensor(exp_per, dtype=torch.float64), rtol=1e-7, atol=1e-8)  # masked stats divide by n + 1e-8 (seed 000)


def test_normalize_then_sum_keeps_apart_what_sum_then_normalize_collapses():
    """GDPO's motivating case: two binary rewards, (1, 0) and (0, 1) and (1, 1) in one group. GRPO on
    the sum gives (1, 0) and (0, 1) the same advantage; GDPO keeps their weighted difference."""
    comps = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    a, _ = normalize_then_sum(comps, 4, torch.tensor([2.0, 1.0]), batch_normalize=False)
    assert a[0] > a[1] and a[2] > a[0] and a[3] < a[1]


def test_a_component_that_never_applies_and_a_sample_with_nothing_scored_give_zero():
    comps = torch.tensor([[1.0, float("nan")], [0.0, float("inf")], [1.0, 2.0], [1.0, 2.0]])
    valid = torch.tensor([[True, False], [True, False], [False, False], [True, True]])
    a, per = normalize_then_sum(comps, 2, mask=valid)
    assert torch.isfinite(a).all() and torch.isfinite(per).all()
    assert a[2] == 0 and (per[2] == 0).all() and (per[:2, 1] == 0).all()


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), group=st.sampled_from([1, 2, 4]), groups=st.integers(1, 4),
       k=st.integers(1, 4), scale=st.sampled_from([0.0, 1e-30, 1.0, 1e6, 1e30]),
       dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
       equal=st.booleans())
def test_normalize_then_sum_is_finite_on_hostile_inputs(seed, group, groups, k, scale, dtype, equal):
    g = torch.Generator().manual_seed(seed)
    b = group * groups
    comps = torch.randn(b, k, generator=g, dtype=torch.float64) * scale
    if equal:
        comps = comps[:1].expand(b, k).clone()
    comps = comps.clamp(-6e4, 6e4).to(dtype) if dtype == torch.float16 else comps.to(dtype)
    valid = torch.rand(b, k, generator=g) < 0.7
    a, per = normalize_then_sum(comps, group, mask=valid)
    assert torch.isfinite(a).all() and torch.isfinite(per).all()
    if equal or group == 1:
        assert (per == 0).all()


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 10**7), min_size=1, max_size=8), l_max=st.integers(1, 10**6),
       frac=st.floats(0.01, 1.0), factor=st.floats(0.0, 10.0))
def test_overlong_penalty_is_bounded_and_monotone(lengths, l_max, frac, factor):
    buf = max(1, int(frac * l_max))
    x = torch.tensor(sorted(lengths))
    p = overlong_penalty(x, l_max, buf, factor)
    assert torch.isfinite(p).all() and (p <= 0).all() and (p >= -factor - 1e-6).all()
    assert (p[1:] <= p[:-1] + 1e-6).all()  # longer is never better
