"""Token log-probabilities and entropies (values and gradients) against a float64 oracle.

The oracle works token by token on Python floats: ``lse = m + log(sum exp(z - m))``,
``logp = z[y] - lse``, ``H = lse - sum p z``, and the hand-written gradients
``dlogp/dz = onehot(y) - p`` and ``dH/dz = -p (z - sum p z)``, each divided by the temperature.
"""

import math

import pytest
import torch

from steadyrl.functional import (
    entropy_from_logits,
    logprobs_and_entropy_from_logits,
    logprobs_from_hidden,
    logprobs_from_logits,
)

B, T, V, H = 3, 5, 11, 4
IGNORE = -100


def make_case(seed, dtype=torch.float32, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(B, T, V, generator=g, dtype=torch.float64) * scale).to(dtype)
    labels = torch.randint(0, V, (B, T), generator=g)
    labels[0, 3] = IGNORE
    labels[2, 0] = IGNORE
    labels[1, 4] = IGNORE
    w_logp = torch.randn(B, T, generator=g, dtype=torch.float64)
    w_ent = torch.randn(B, T, generator=g, dtype=torch.float64)
    return logits, labels, w_logp, w_ent


def token_oracle(z_row, temperature):
    """(lse, probabilities, mean logit under p) of one token's logits, in Python floats."""
    z = [float(v) / temperature for v in z_row]
    m = max(z)
    lse = m + math.log(math.fsum(math.exp(v - m) for v in z))
    p = [math.exp(v - lse) for v in z]
    ez = math.fsum(pi * zi for pi, zi in zip(p, z))
    return z, lse, p, ez


def oracle(logits, labels, temperature, w_logp, w_ent):
    """Per-token logp, entropy and d(sum w_logp*logp + sum w_ent*H)/d logits, nested lists."""
    logp, ent, grad = [], [], []
    for b in range(logits.shape[0]):
        lrow, erow, grow = [], [], []
        for t in range(logits.shape[1]):
            z, lse, p, ez = token_oracle(logits[b, t].tolist(), temperature)
            y = int(labels[b, t])
            lrow.append(z[y] - lse if y >= 0 else 0.0)
            erow.append(lse - ez)
            wl = float(w_logp[b, t]) if y >= 0 else 0.0
            we = float(w_ent[b, t])
            g = []
            for v in range(len(z)):
                d_logp = (1.0 if v == y else 0.0) - p[v]
                d_ent = -p[v] * (z[v] - ez)
                g.append((wl * d_logp + we * d_ent) / temperature)
            grow.append(g)
        logp.append(lrow)
        ent.append(erow)
        grad.append(grow)
    return (torch.tensor(logp, dtype=torch.float64), torch.tensor(ent, dtype=torch.float64),
            torch.tensor(grad, dtype=torch.float64))


# value tolerance: float32 arithmetic on the (rounded) inputs; gradient tolerance: the gradient is
# written in the logits' dtype, so bf16/fp16 gradients carry that rounding.
VALUE_TOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.bfloat16: 5e-5, torch.float16: 5e-5}
GRAD_TOL = {torch.float64: 1e-12, torch.float32: 3e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.6])
@pytest.mark.parametrize("chunk_size", [None, 1, 4])
def test_logprobs_and_entropy_values_and_gradients_match_the_oracle(dtype, temperature, chunk_size):
    logits, labels, w_logp, w_ent = make_case(int(temperature * 10) + (chunk_size or 0), dtype)
    exp_logp, exp_ent, exp_grad = oracle(logits.double(), labels, temperature, w_logp, w_ent)
    out_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    tol = VALUE_TOL[dtype]

    x = logits.clone().requires_grad_(True)
    logp, ent = logprobs_and_entropy_from_logits(x, labels, temperature, chunk_size=chunk_size)
    assert logp.shape == ent.shape == (B, T)
    assert logp.dtype == ent.dtype == out_dtype
    torch.testing.assert_close(logp.double(), exp_logp, rtol=tol, atol=tol)
    torch.testing.assert_close(ent.double(), exp_ent, rtol=tol, atol=tol)
    ((logp.double() * w_logp).sum() + (ent.double() * w_ent).sum()).backward()
    assert x.grad.dtype == dtype
    gt = GRAD_TOL[dtype]
    torch.testing.assert_close(x.grad.double(), exp_grad, rtol=gt, atol=gt)

    # the single-output entry points agree with the oracle too, gradients included
    x1 = logits.clone().requires_grad_(True)
    lp_only = logprobs_from_logits(x1, labels, temperature, chunk_size=chunk_size)
    assert lp_only.dtype == out_dtype
    torch.testing.assert_close(lp_only.double(), exp_logp, rtol=tol, atol=tol)
    (lp_only.double() * w_logp).sum().backward()
    _, _, grad_logp_only = oracle(logits.double(), labels, temperature, w_logp, torch.zeros_like(w_ent))
    torch.testing.assert_close(x1.grad.double(), grad_logp_only, rtol=gt, atol=gt)

    x2 = logits.clone().requires_grad_(True)
    ent_only = entropy_from_logits(x2, temperature, chunk_size=chunk_size)
    assert ent_only.dtype == out_dtype
    torch.testing.assert_close(ent_only.double(), exp_ent, rtol=tol, atol=tol)
    (ent_only.double() * w_ent).sum().backward()
    _, _, grad_ent_only = oracle(logits.double(), labels, temperature, torch.zeros_like(w_logp), w_ent)
    torch.testing.assert_close(x2.grad.double(), grad_ent_only, rtol=gt, atol=gt)


def test_ignored_labels_give_zero_logprob_and_no_gradient():
    logits, labels, _, _ = make_case(3)
    labels[1, :] = IGNORE
    x = logits.clone().requires_grad_(True)
    logp = logprobs_from_logits(x, labels, chunk_size=2)
    assert logp[1].eq(0).all() and logp[0, 3] == 0 and logp[2, 0] == 0
    assert logp[labels >= 0].lt(0).all()
    logp.sum().backward()
    assert x.grad[1].eq(0).all() and x.grad[0, 3].eq(0).all()
    assert x.grad[0, 0].abs().sum() > 0


def test_chunk_size_does_not_change_values_or_gradients():
    logits, labels, w_logp, w_ent = make_case(5)
    results = []
    for chunk in (None, 1, 2, 3, 7, 15, 100):
        x = logits.clone().requires_grad_(True)
        logp, ent = logprobs_and_entropy_from_logits(x, labels, 0.9, chunk_size=chunk)
        ((logp * w_logp.float()).sum() + (ent * w_ent.float()).sum()).backward()
        results.append((logp, ent, x.grad))
    for logp, ent, grad in results[1:]:
        torch.testing.assert_close(logp, results[0][0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ent, results[0][1], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(grad, results[0][2], rtol=1e-6, atol=1e-7)


def test_banned_tokens_with_minus_inf_logits_have_zero_probability_and_finite_entropy():
    logits, labels, _, _ = make_case(6)
    logits[..., 0] = float("-inf")
    labels = labels.clamp(min=1)
    x = logits.clone().requires_grad_(True)
    logp, ent = logprobs_and_entropy_from_logits(x, labels)
    assert torch.isfinite(logp).all() and torch.isfinite(ent).all()
    (logp.sum() + ent.sum()).backward()
    assert torch.isfinite(x.grad).all() and x.grad[..., 0].eq(0).all()
    kept = logits[..., 1:].double()
    ref_logp, ref_ent, _ = oracle(kept, labels - 1, 1.0, torch.zeros(B, T), torch.zeros(B, T))
    torch.testing.assert_close(logp.double(), ref_logp, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(ent.double(), ref_ent, rtol=2e-5, atol=2e-5)


def test_inputs_are_not_mutated():
    logits, labels, _, _ = make_case(8)
    l0, y0 = logits.clone(), labels.clone()
    x = logits.clone().requires_grad_(True)
    logp, ent = logprobs_and_entropy_from_logits(x, labels, 0.5, chunk_size=2)
    (logp.sum() + ent.sum()).backward()
    assert torch.equal(x.detach(), l0) and torch.equal(labels, y0)


# --- from hidden states ---------------------------------------------------------------------------


def hidden_oracle(hidden, weight, bias, labels, temperature, w_logp, w_ent):
    """Logits by loops, then the token oracle; gradients of hidden, weight and bias by the chain rule."""
    Bh, Th, Hh = hidden.shape
    Vw = weight.shape[0]
    logits = torch.zeros(Bh, Th, Vw, dtype=torch.float64)
    for b in range(Bh):
        for t in range(Th):
            for v in range(Vw):
                acc = math.fsum(float(hidden[b, t, k]) * float(weight[v, k]) for k in range(Hh))
                logits[b, t, v] = acc + (float(bias[v]) if bias is not None else 0.0)
    logp, ent, gz = oracle(logits, labels, temperature, w_logp, w_ent)
    g_hidden = torch.zeros(Bh, Th, Hh, dtype=torch.float64)
    g_weight = torch.zeros(Vw, Hh, dtype=torch.float64)
    g_bias = torch.zeros(Vw, dtype=torch.float64)
    for b in range(Bh):
        for t in range(Th):
            for v in range(Vw):
                g = float(gz[b, t, v])
                g_bias[v] += g
                for k in range(Hh):
                    g_hidden[b, t, k] += g * float(weight[v, k])
                    g_weight[v, k] += g * float(hidden[b, t, k])
    return logp, ent, g_hidden, g_weight, g_bias


@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logprobs_from_hidden_matches_the_oracle(use_bias, chunk_size, dtype):
    g = torch.Generator().manual_seed(21)
    hidden = torch.randn(B, T, H, generator=g, dtype=torch.float64)
    weight = torch.randn(V, H, generator=g, dtype=torch.float64)
    bias = torch.randn(V, generator=g, dtype=torch.float64) if use_bias else None
    _, labels, w_logp, w_ent = make_case(22)
    temperature = 0.8
    exp = hidden_oracle(hidden, weight, bias, labels, temperature, w_logp, w_ent)

    tol = 1e-10 if dtype == torch.float64 else 1e-4
    h = hidden.to(dtype).requires_grad_(True)
    w = weight.to(dtype).requires_grad_(True)
    bb = bias.to(dtype).requires_grad_(True) if use_bias else None
    logp, ent = logprobs_from_hidden(h, w, labels, temperature, return_entropy=True,
                                     chunk_size=chunk_size, bias=bb)
    assert logp.dtype == ent.dtype == dtype
    torch.testing.assert_close(logp.double(), exp[0], rtol=tol / 5, atol=tol / 5)
    torch.testing.assert_close(ent.double(), exp[1], rtol=tol / 5, atol=tol / 5)
    ((logp.double() * w_logp).sum() + (ent.double() * w_ent).sum()).backward()
    assert h.grad.dtype == w.grad.dtype == dtype
    torch.testing.assert_close(h.grad.double(), exp[2], rtol=tol, atol=tol)
    torch.testing.assert_close(w.grad.double(), exp[3], rtol=tol, atol=tol)
    if use_bias:
        torch.testing.assert_close(bb.grad.double(), exp[4], rtol=tol, atol=tol)

    only = logprobs_from_hidden(hidden.to(dtype), weight.to(dtype), labels, temperature, chunk_size=chunk_size,
                                bias=None if bias is None else bias.to(dtype))
    torch.testing.assert_close(only, logp.detach())


@pytest.mark.parametrize("row", [[1e4, 1e4], [-1e4, -1e4], [1e4, 1e4 - 1.0, -1e4], [5e3, 5e3, 5e3, 5e3]])
def test_entropy_is_shift_invariant_for_large_logits(row):
    logits = torch.tensor([row], dtype=torch.float32)
    _, lse, _, ez = token_oracle([v - row[0] for v in row], 1.0)  # exact: the rows are exact in float32
    expected = lse - ez
    assert entropy_from_logits(logits).item() == pytest.approx(expected, abs=1e-4)
    shifted = entropy_from_logits(logits - row[0]).item()
    assert entropy_from_logits(logits).item() == pytest.approx(shifted, abs=1e-4)
