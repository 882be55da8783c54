"""``logprobs_from_hidden_rows`` (``trainer.logprob_impl: chunked_grad``: whole-row token chunks, one
recompute in the backward, or none when only the hidden states need a gradient) against the same
float64 oracle as ``logprobs_from_hidden`` (test_logprobs_fused.py), and against that path itself."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional import logprobs_from_hidden
from steadyrl.functional import logprobs_grad as rows_mod
from steadyrl.functional.logprobs_grad import logprobs_from_hidden_rows

from .test_logprobs_fused import H, IGNORE, V, assert_all_close, largest_token_by_vocab_tensor, leaves, make_case, naive


def rows(hidden, weight, bias, labels, temperature, w_logp, w_ent, with_entropy=True, chunk_size=None,
         frozen_head=False):
    h, w, b = leaves(hidden, weight, bias)
    if frozen_head:
        w, b = weight, bias
    out = logprobs_from_hidden_rows(h, w, labels, temperature, return_entropy=with_entropy,
                                    chunk_size=chunk_size, bias=b)
    logp, ent = out if with_entropy else (out, None)
    loss = (logp.double() * w_logp).sum() + ((ent.double() * w_ent).sum() if with_entropy else 0.0)
    loss.backward()
    grads = (h.grad, None, None) if frozen_head else (h.grad, w.grad, None if b is None else b.grad)
    return logp.detach(), None if ent is None else ent.detach(), *grads


@pytest.mark.parametrize("frozen_head", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 1, 3, 5, 14, 100])
@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_values_and_gradients_match_the_float64_oracle_in_float32(chunk_size, temperature, frozen_head):
    case = make_case(1)
    got = rows(*case[:4], temperature, *case[4:], chunk_size=chunk_size, frozen_head=frozen_head)
    want = naive(*case[:4], temperature, *case[4:])
    assert got[0].dtype == got[1].dtype == torch.float32
    assert (got[0][0, 2], got[0][1, 6]) == (0.0, 0.0)  # ignored labels
    assert_all_close(got, want, 1e-5)


@pytest.mark.parametrize("frozen_head", [False, True])
@pytest.mark.parametrize("use_bias", [False, True])
def test_logprobs_only_gradients_match(use_bias, frozen_head):
    hidden, weight, bias, labels, w_logp, w_ent = make_case(2, use_bias=use_bias)
    got = rows(hidden, weight, bias, labels, 0.8, w_logp, w_ent, with_entropy=False, chunk_size=4,
               frozen_head=frozen_head)
    assert_all_close(got, naive(hidden, weight, bias, labels, 0.8, w_logp, w_ent, with_entropy=False), 1e-5)


@pytest.mark.parametrize("frozen_head", [False, True])
def test_entropy_only_gradient_matches(frozen_head):
    hidden, weight, bias, labels, w_logp, w_ent = make_case(2)
    want = rows(hidden, weight, bias, labels, 0.8, torch.zeros_like(w_logp), w_ent, chunk_size=4,
                frozen_head=frozen_head)
    h, w, b = leaves(hidden, weight, bias)
    if frozen_head:
        w, b = weight, bias
    _, ent = logprobs_from_hidden_rows(h, w, labels, 0.8, return_entropy=True, chunk_size=4, bias=b)
    (ent.double() * w_ent).sum().backward()  # the log-prob output gets no gradient at all
    got = (None, None, h.grad) + ((None, None) if frozen_head else (w.grad, b.grad))
    assert_all_close(got, want, 1e-6)


@pytest.mark.parametrize("frozen_head", [False, True])
def test_float64_matches_to_rounding(frozen_head):
    case = make_case(3, dtype=torch.float64)
    got = rows(*case[:4], 0.9, *case[4:], chunk_size=5, frozen_head=frozen_head)
    assert_all_close(got, naive(*case[:4], 0.9, *case[4:]), 1e-12)


@pytest.mark.parametrize("frozen_head", [False, True])
def test_bfloat16_inputs_match_within_bfloat16_rounding(frozen_head):
    case = make_case(4, dtype=torch.bfloat16)
    got = rows(*case[:4], 0.7, *case[4:], chunk_size=3, frozen_head=frozen_head)
    assert got[0].dtype == torch.float32 and got[2].dtype == torch.bfloat16
    assert_all_close(got, naive(*case[:4], 0.7, *case[4:]), 4e-2)  # the fused path's tolerance


def test_bfloat16_values_and_gradients_equal_the_fused_path_within_its_own_rounding():
    hidden, weight, bias, labels, w_logp, w_ent = make_case(4, dtype=torch.bfloat16)
    out = []
    for fn in (logprobs_from_hidden, logprobs_from_hidden_rows):
        h, w, b = leaves(hidden, weight, bias)
        logp, ent = fn(h, w, labels, 0.7, return_entropy=True, chunk_size=3, bias=b)
        ((logp.double() * w_logp).sum() + (ent.double() * w_ent).sum()).backward()
        out.append((logp, ent, h.grad, w.grad, b.grad))
    # the same bf16 matmuls and float32 softmax: the values agree to float32 rounding
    assert_all_close(out[1][:2], out[0][:2], 1e-5)
    assert_all_close(out[1][2:], out[0][2:], 2e-2)


def test_cpu_autocast_runs_the_matmuls_in_bfloat16_and_keeps_float32_gradients():
    hidden, weight, bias, labels, w_logp, w_ent = make_case(5)
    h, w = leaves(hidden, weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logp, ent = logprobs_from_hidden_rows(h, w, labels, return_entropy=True, chunk_size=4)
    ((logp.double() * w_logp).sum() + (ent.double() * w_ent).sum()).backward()
    assert logp.dtype == torch.float32 and h.grad.dtype == w.grad.dtype == torch.float32
    assert_all_close((logp, ent, h.grad, w.grad), naive(hidden, weight, None, labels, 1.0, w_logp, w_ent), 4e-2)


@pytest.mark.parametrize("frozen_head", [False, True])
def test_gradcheck_in_float64(frozen_head):
    g = torch.Generator().manual_seed(6)
    hidden = torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(9, 3, dtype=torch.float64, generator=g, requires_grad=not frozen_head)
    bias = torch.randn(9, dtype=torch.float64, generator=g, requires_grad=not frozen_head)
    labels = torch.tensor([0, 8, IGNORE, 4, 4])

    def f(*args):
        h, w, b = args if not frozen_head else (args[0], weight, bias)
        return logprobs_from_hidden_rows(h, w, labels, 0.7, return_entropy=True, chunk_size=2, bias=b)

    assert torch.autograd.gradcheck(f, (hidden,) if frozen_head else (hidden, weight, bias))


@pytest.mark.parametrize("scale", [1e2, 1e3])  # hidden x scale -> logits up to ~1e4 (and / 0.3)
@pytest.mark.parametrize("temperature", [1.0, 0.3])
@pytest.mark.parametrize("frozen_head", [False, True])
def test_hostile_logits_give_finite_values_and_gradients(scale, temperature, frozen_head):
    hidden, weight, bias, labels, w_logp, w_ent = make_case(8, scale=scale)
    got = rows(hidden, weight, bias, labels, temperature, w_logp, w_ent, chunk_size=3, frozen_head=frozen_head)
    for x in got:
        assert x is None or torch.isfinite(x).all()
    logp, ent = got[:2]
    assert (logp <= 0).all()
    assert (ent >= -1e-3).all() and (ent <= torch.log(torch.tensor(float(V))) + 1e-3).all()
    want = naive(hidden, weight, bias, labels, temperature, w_logp, w_ent)
    torch.testing.assert_close(logp.double(), want[0], rtol=1e-4, atol=2e-2)
    torch.testing.assert_close(ent.double(), want[1], rtol=1e-4, atol=2e-2)


@pytest.mark.parametrize("frozen_head", [False, True])
def test_banned_tokens_with_minus_inf_bias_are_excluded_not_nan(frozen_head):
    hidden, weight, bias, labels, w_logp, w_ent = make_case(9)
    banned = torch.zeros(V, dtype=torch.bool)
    banned[::3] = True
    banned[32:48] = True
    bias = bias.masked_fill(banned, float("-inf"))
    labels = torch.where(banned[labels.clamp(min=0)] & (labels >= 0), 1, labels)
    got = rows(hidden, weight, bias, labels, 0.9, w_logp, w_ent, chunk_size=4, frozen_head=frozen_head)
    keep = ~banned
    remap = torch.cumsum(keep.long(), 0) - 1
    sub = naive(hidden, weight[keep], bias[keep], torch.where(labels >= 0, remap[labels.clamp(min=0)], labels),
                0.9, w_logp, w_ent)
    assert_all_close(got[:3], sub[:3], 1e-5)
    if not frozen_head:
        torch.testing.assert_close(got[3][keep].double(), sub[3], rtol=1e-5, atol=1e-5)
        assert (got[3][banned] == 0).all() and (got[4][banned] == 0).all()


def test_no_tokens_give_empty_outputs_and_a_zero_weight_gradient():
    w = torch.randn(V, H, requires_grad=True)
    logp, ent = logprobs_from_hidden_rows(torch.zeros(0, H), w, torch.zeros(0, dtype=torch.long),
                                          return_entropy=True)
    assert logp.shape == ent.shape == (0,)
    (logp.sum() + ent.sum()).backward()
    assert (w.grad == 0).all()


def test_no_grad_forward_equals_the_grad_forward():
    hidden, weight, bias, labels, *_ = make_case(12)
    with torch.no_grad():
        cold = logprobs_from_hidden_rows(hidden, weight, labels, return_entropy=True, bias=bias)
    hot = logprobs_from_hidden_rows(hidden.requires_grad_(), weight, labels, return_entropy=True, bias=bias)
    assert all(torch.equal(c, h.detach()) for c, h in zip(cold, hot))


@pytest.mark.parametrize("frozen_head", [False, True])
def test_logits_never_exist_whole_in_forward_or_backward(frozen_head):
    n, vocab, hdim, chunk = 256, 3000, 8, 4
    g = torch.Generator().manual_seed(11)
    hidden = torch.randn(n, hdim, generator=g, requires_grad=True)
    weight = torch.randn(vocab, hdim, generator=g, requires_grad=not frozen_head)
    labels = torch.randint(0, vocab, (n,), generator=g)

    def run():
        logp, ent = logprobs_from_hidden_rows(hidden, weight, labels, 0.7, return_entropy=True, chunk_size=chunk)
        (logp.sum() + ent.sum()).backward()

    assert largest_token_by_vocab_tensor(run, vocab, hdim) <= chunk * vocab
    assert hidden.grad is not None and (frozen_head or weight.grad is not None)


def test_automatic_chunk_is_whole_rows_within_the_element_budget(monkeypatch):
    monkeypatch.setitem(rows_mod.ROW_CHUNK_ELEMENTS, "cpu", 10 * V)
    assert rows_mod._rows(1000, V, None, torch.device("cpu")) == 10
    assert rows_mod._rows(3, V, None, torch.device("cpu")) == 3
    assert rows_mod._rows(1000, 10**9, None, torch.device("cpu")) == 1
    with pytest.raises(ValueError, match="chunk_size"):
        rows_mod._rows(10, V, 0, torch.device("cpu"))


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(1e-3, 3e3), temperature=st.floats(0.05, 5.0), chunk=st.integers(1, 20),
       seed=st.integers(0, 10**6))
def test_hypothesis_hostile_scales_stay_finite_and_match_the_oracle(scale, temperature, chunk, seed):
    case = make_case(seed, dtype=torch.float64, scale=scale)
    got = rows(*case[:4], temperature, *case[4:], chunk_size=chunk)
    want = naive(*case[:4], temperature, *case[4:])
    for x in got:
        assert torch.isfinite(x).all()
    assert_all_close(got, want, 1e-8)
