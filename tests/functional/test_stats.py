"""Masked reductions, whitening, explained variance and RunningMoments against a float64 oracle.

The oracle is plain Python: loops over rows and elements, math on Python floats. Inputs are
random with random right-padded masks (row lengths 0..T); padding holds large garbage, so a
result that lets padding in is far off, not slightly off.
"""

import math
import statistics

import pytest
import torch

from steadyrl.functional import (
    RunningMoments,
    explained_variance,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from steadyrl.functional.constants import MASK_EPS, RUNNING_COUNT_INIT, WHITEN_EPS

from support import ALL_DTYPES

LOW_PRECISION = [torch.float16, torch.bfloat16]


def padded_case(seed, B=6, T=7, scale=3.0, offset=0.5):
    """Random ``x [B, T]`` float64 and a right-padded bool mask with lengths 0..T (first row
    empty, last row full); padding holds 1e30 garbage."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=g, dtype=torch.float64) * scale + offset
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0], lengths[-1] = 0, T
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    x = torch.where(mask, x, torch.full_like(x, 1e30))
    return x, mask


def valid_values(x, mask):
    """All valid entries, row-major, as Python floats."""
    return [float(x[b, t]) for b in range(x.shape[0]) for t in range(x.shape[1]) if mask[b, t]]


def row_values(x, mask, b):
    return [float(x[b, t]) for t in range(x.shape[1]) if mask[b, t]]


def col_values(x, mask, t):
    return [float(x[b, t]) for b in range(x.shape[0]) if mask[b, t]]


def oracle_mean(vals):
    return math.fsum(vals) / (len(vals) + MASK_EPS)


def oracle_var(vals, unbiased=True):
    n = len(vals)
    if n <= 1:
        return 0.0
    mean = math.fsum(vals) / n
    ss = math.fsum((v - mean) ** 2 for v in vals)
    return ss / (n - 1) if unbiased else ss / n


def cast(x, dtype):
    """``x`` in ``dtype``, and the float64 view of those rounded values for the oracle."""
    y = x.to(dtype) if dtype != torch.float64 else x.clone()
    if dtype in LOW_PRECISION:
        # keep the garbage representable so a leak is large but not an overflow of the cast
        y = torch.where(torch.isinf(y), torch.full_like(y, 1e4), y)
    return y, y.to(torch.float64)


# float64 is held to the size of the seed-000 epsilons (1e-8 added to denominators), the rest to
# float32 rounding: low-precision inputs are compared with the oracle on their rounded values, so
# the loose part of their tolerance is only the float32 arithmetic, which fp16 arithmetic would miss.
TOL = {
    torch.float64: dict(rel=1e-7, abs=1e-7),
    torch.float32: dict(rel=2e-5, abs=2e-5),
    torch.bfloat16: dict(rel=1e-4, abs=1e-4),
    torch.float16: dict(rel=1e-4, abs=1e-4),
}


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_masked_sum_matches_the_loop_over_valid_entries(dtype, seed):
    x, mask = padded_case(seed)
    y, xo = cast(x, dtype)
    tol = TOL[dtype]
    assert float(masked_sum(y, mask)) == pytest.approx(math.fsum(valid_values(xo, mask)), **tol)
    per_row = masked_sum(y, mask, dim=1)
    per_col = masked_sum(y, mask, dim=0)
    for b in range(x.shape[0]):
        assert float(per_row[b]) == pytest.approx(math.fsum(row_values(xo, mask, b)), **tol)
    for t in range(x.shape[1]):
        assert float(per_col[t]) == pytest.approx(math.fsum(col_values(xo, mask, t)), **tol)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masked_mean_matches_the_loop_over_valid_entries(dtype, seed):
    x, mask = padded_case(seed)
    y, xo = cast(x, dtype)
    tol = TOL[dtype]
    assert float(masked_mean(y, mask)) == pytest.approx(oracle_mean(valid_values(xo, mask)), **tol)
    per_row = masked_mean(y, mask, dim=1)
    per_last = masked_mean(y, mask, dim=-1)
    per_col = masked_mean(y, mask, dim=0)
    assert per_row.shape == (x.shape[0],) and per_col.shape == (x.shape[1],)
    for b in range(x.shape[0]):
        expected = oracle_mean(row_values(xo, mask, b))
        assert float(per_row[b]) == pytest.approx(expected, **tol)
        assert float(per_last[b]) == pytest.approx(expected, **tol)
    for t in range(x.shape[1]):
        assert float(per_col[t]) == pytest.approx(oracle_mean(col_values(xo, mask, t)), **tol)


def test_masked_mean_of_an_all_masked_row_is_exactly_zero():
    x = torch.tensor([[float("nan"), float("inf"), 3.0], [1.0, 2.0, 3.0]])
    mask = torch.tensor([[0, 0, 0], [1, 1, 0]])
    per_row = masked_mean(x, mask, dim=1)
    assert per_row[0].item() == 0.0
    assert per_row[1].item() == pytest.approx(1.5)
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0


def test_masked_mean_accepts_float_bool_and_int_masks_alike():
    x, mask = padded_case(3)
    expected = masked_mean(x, mask, dim=1)
    for m in (mask.float(), mask.long(), mask.to(torch.float64)):
        torch.testing.assert_close(masked_mean(x, m, dim=1), expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("unbiased", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masked_var_matches_the_loop_over_valid_entries(dtype, unbiased, seed):
    x, mask = padded_case(seed)
    y, xo = cast(x, dtype)
    tol = TOL[dtype]
    expected = oracle_var(valid_values(xo, mask), unbiased)
    assert float(masked_var(y, mask, unbiased=unbiased)) == pytest.approx(expected, **tol)
    per_row = masked_var(y, mask, unbiased=unbiased, dim=1)
    for b in range(x.shape[0]):
        assert float(per_row[b]) == pytest.approx(oracle_var(row_values(xo, mask, b), unbiased), **tol)
    per_col = masked_var(y, mask, unbiased=unbiased, dim=0)
    for t in range(x.shape[1]):
        assert float(per_col[t]) == pytest.approx(oracle_var(col_values(xo, mask, t), unbiased), **tol)


@pytest.mark.parametrize("unbiased", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_var_of_one_valid_element_is_zero_and_of_none_is_zero(unbiased, dtype):
    x = torch.tensor([[5.0, 1e30, -1e30], [7.0, 9.0, 11.0], [3.0, 4.0, 5.0]], dtype=dtype)
    mask = torch.tensor([[1, 0, 0], [0, 0, 0], [1, 1, 1]])
    per_row = masked_var(x, mask, unbiased=unbiased, dim=1)
    assert per_row[0].item() == 0.0
    assert per_row[1].item() == 0.0
    assert per_row[2].item() == pytest.approx(1.0 if unbiased else 2.0 / 3.0, rel=1e-6)
    single = torch.zeros(3, 3, dtype=torch.bool)
    single[1, 2] = True
    assert masked_var(x, single, unbiased=unbiased).item() == 0.0


def oracle_whiten(x, mask, shift_mean):
    vals = valid_values(x, mask)
    n = len(vals)
    mean = math.fsum(vals) / n if n else 0.0
    inv_std = 1.0 / math.sqrt(oracle_var(vals, True) + WHITEN_EPS)
    out = [[0.0] * x.shape[1] for _ in range(x.shape[0])]
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            if mask[b, t]:
                w = (float(x[b, t]) - mean) * inv_std
                out[b][t] = w if shift_mean else w + mean
    return out


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shift_mean", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_masked_whiten_matches_the_loop(dtype, shift_mean, seed):
    x, mask = padded_case(seed, scale=4.0, offset=2.0)
    y, xo = cast(x, dtype)
    out = masked_whiten(y, mask, shift_mean=shift_mean)
    expected = oracle_whiten(xo, mask, shift_mean)
    tol = TOL[dtype]
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            assert float(out[b, t]) == pytest.approx(expected[b][t], **tol)
    assert out[~mask].eq(0).all()


def test_masked_whiten_gives_zero_mean_unit_unbiased_variance_over_valid_tokens():
    x, mask = padded_case(5, scale=100.0, offset=-40.0)
    out = masked_whiten(x, mask)
    vals = valid_values(out, mask)
    assert statistics.fmean(vals) == pytest.approx(0.0, abs=1e-9)
    assert statistics.variance(vals) == pytest.approx(1.0, rel=1e-9)


def test_masked_whiten_gradient_matches_finite_differences():
    x, mask = padded_case(7, B=3, T=4)
    x = torch.where(mask, x, torch.zeros_like(x)).requires_grad_(True)
    w = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for shift in (True, False):
        assert torch.autograd.gradcheck(lambda z: (masked_whiten(z, mask, shift) * w).sum(), (x,))


def oracle_explained_variance(values, returns, mask):
    rets = valid_values(returns, mask)
    errs = [float(returns[b, t]) - float(values[b, t])
            for b in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[b, t]]
    var_r = oracle_var(rets)
    if var_r == 0:
        return 0.0
    return 1.0 - oracle_var(errs) / var_r


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_explained_variance_matches_the_loop(dtype, seed):
    returns, mask = padded_case(seed)
    noise = torch.randn(returns.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    values = torch.where(mask, returns + (0.5 + seed) * noise, torch.full_like(returns, -1e30))
    v, vo = cast(values, dtype)
    r, ro = cast(returns, dtype)
    out = explained_variance(v, r, mask)
    assert out.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert float(out) == pytest.approx(oracle_explained_variance(vo, ro, mask), **TOL[dtype])


def test_explained_variance_is_one_for_a_perfect_critic_and_zero_without_spread():
    returns, mask = padded_case(4)
    assert explained_variance(returns, returns, mask).item() == pytest.approx(1.0)
    flat = torch.full_like(returns, 2.5)
    assert explained_variance(returns, flat, mask).item() == 0.0
    assert explained_variance(returns, returns, torch.zeros_like(mask)).item() == 0.0


@pytest.mark.parametrize("fn", [masked_sum, masked_mean, masked_var, masked_whiten])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_stats_return_float32_for_low_and_single_precision(fn, dtype):
    x, mask = padded_case(0)
    y, _ = cast(x, dtype)
    assert fn(y, mask).dtype == torch.float32
    assert fn(x, mask).dtype == torch.float64


def test_stats_do_not_mutate_their_inputs():
    x, mask = padded_case(0)
    x0, m0 = x.clone(), mask.clone()
    for fn in (masked_sum, masked_mean, masked_var, masked_whiten):
        fn(x, mask)
    explained_variance(x, x * 0.5, mask)
    assert torch.equal(x, x0) and torch.equal(mask, m0)


# --- RunningMoments -------------------------------------------------------------------------------


def test_running_moments_count_starts_at_1e_minus_24():
    rm = RunningMoments()
    assert rm.count == RUNNING_COUNT_INIT == 1e-24
    assert rm.mean == 0.0 and rm.std == 0.0


def test_running_moments_update_returns_batch_stats_and_tracks_everything_seen():
    g = torch.Generator().manual_seed(11)
    rm = RunningMoments()
    seen = []
    for i in range(6):
        n = 3 + 4 * i
        x = (torch.randn(n, generator=g, dtype=torch.float64) * (1 + i) + 10.0 * i).to(torch.float32)
        mask = torch.rand(n, generator=g) < 0.7
        mask[0] = True
        batch = [float(v) for v, keep in zip(x.tolist(), mask.tolist()) if keep]
        batch_mean, batch_std = rm.update(x, mask)
        seen.extend(batch)
        assert batch_mean == pytest.approx(statistics.fmean(batch), rel=1e-12, abs=1e-12)
        expected_std = statistics.stdev(batch) if len(batch) > 1 else 0.0
        assert batch_std == pytest.approx(expected_std, rel=1e-10, abs=1e-12)
        assert rm.mean == pytest.approx(statistics.fmean(seen), rel=1e-10)
        assert rm.std == pytest.approx(statistics.stdev(seen), rel=1e-10)
        assert rm.count == pytest.approx(len(seen), rel=1e-15)


def test_running_moments_first_update_of_one_value_is_exact_and_std_stays_zero():
    rm = RunningMoments()
    assert rm.update(torch.tensor([3.25])) == (3.25, 0.0)
    assert rm.mean == 3.25 and rm.std == 0.0
    rm.update(torch.tensor([4.25]))
    assert rm.mean == pytest.approx(3.75) and rm.std == pytest.approx(statistics.stdev([3.25, 4.25]))


def test_running_moments_empty_batch_changes_nothing():
    rm = RunningMoments()
    rm.update(torch.tensor([1.0, 2.0, 4.0]))
    before = rm.state_dict()
    assert rm.update(torch.tensor([5.0, 6.0]), torch.tensor([False, False])) == (0.0, 0.0)
    assert rm.state_dict() == before


def test_running_moments_state_dict_round_trip_continues_identically():
    g = torch.Generator().manual_seed(3)
    a = RunningMoments()
    a.update(torch.randn(17, generator=g))
    b = RunningMoments()
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    nxt = torch.randn(9, generator=g) * 5
    assert a.update(nxt) == b.update(nxt)
    assert (a.mean, a.std, a.count) == (b.mean, b.std, b.count)
    with pytest.raises(KeyError, match="count"):
        RunningMoments().load_state_dict({"mean": 0.0, "var": 1.0})


def test_running_moments_refuses_non_finite_values_but_ignores_them_in_padding():
    rm = RunningMoments()
    with pytest.raises(ValueError, match="NaN or inf"):
        rm.update(torch.tensor([1.0, float("nan")]))
    assert rm.count == RUNNING_COUNT_INIT
    rm.update(torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([1, 0, 1]))
    assert rm.mean == pytest.approx(2.0) and rm.std == pytest.approx(math.sqrt(2.0))
