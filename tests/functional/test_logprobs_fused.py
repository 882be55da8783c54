"""``logprobs_from_hidden`` (log-probs and entropy from hidden states and the LM-head weight, tile by
tile, recomputed in backward) against the naive path: ``z = (hidden @ weight.T + bias) / tau`` and
``log_softmax(z)`` taken whole, in float64. Values and gradients w.r.t. hidden, weight and bias.

Small vocabularies fit in one tile, so the tests that must exercise the vocabulary blocks and their
online merge shrink the tile budget with ``small_tiles``.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from steadyrl.functional import logprobs as lp_mod
from steadyrl.functional import logprobs_from_hidden

IGNORE = -100
B, T, H, V = 2, 7, 16, 50  # 14 tokens: chunk sizes 3 and 5 do not divide them


def make_case(seed, dtype=torch.float32, scale=1.0, use_bias=True):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, H, generator=g, dtype=torch.float64) * scale
    weight = torch.randn(V, H, generator=g, dtype=torch.float64) / H**0.5
    bias = torch.randn(V, generator=g, dtype=torch.float64) if use_bias else None
    labels = torch.randint(0, V, (B, T), generator=g)
    labels[0, 2] = labels[1, 6] = IGNORE
    w_logp = torch.randn(B, T, generator=g, dtype=torch.float64)
    w_ent = torch.randn(B, T, generator=g, dtype=torch.float64)
    cast = [x if x is None else x.to(dtype) for x in (hidden, weight, bias)]
    return (*cast, labels, w_logp, w_ent)


def leaves(*tensors):
    return [None if x is None else x.detach().clone().requires_grad_(True) for x in tensors]


def naive(hidden, weight, bias, labels, temperature, w_logp, w_ent, with_entropy=True):
    """Values and gradients of ``sum w_logp logp + sum w_ent H`` through the whole float64 logits."""
    h, w, b = leaves(*(None if x is None else x.double() for x in (hidden, weight, bias)))
    z = h @ w.T + (0.0 if b is None else b)
    logp_all = torch.log_softmax(z / temperature, dim=-1)
    logp = logp_all.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    logp = torch.where(labels >= 0, logp, 0.0)
    ent = -(logp_all.exp() * logp_all).sum(-1)
    loss = (logp * w_logp).sum() + ((ent * w_ent).sum() if with_entropy else 0.0)
    loss.backward()
    return logp.detach(), ent.detach(), h.grad, w.grad, None if b is None else b.grad


def fused(hidden, weight, bias, labels, temperature, w_logp, w_ent, with_entropy=True, chunk_size=None):
    h, w, b = leaves(hidden, weight, bias)
    out = logprobs_from_hidden(h, w, labels, temperature, return_entropy=with_entropy,
                               chunk_size=chunk_size, bias=b)
    logp, ent = out if with_entropy else (out, None)
    loss = (logp.double() * w_logp).sum() + ((ent.double() * w_ent).sum() if with_entropy else 0.0)
    loss.backward()
    return logp.detach(), None if ent is None else ent.detach(), h.grad, w.grad, None if b is None else b.grad


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of at most 60 values, so V = 50 spans several (uneven) vocabulary blocks."""
    monkeypatch.setattr(lp_mod, "DEFAULT_CHUNK_ELEMENTS", 60)
    monkeypatch.setattr(lp_mod, "MIN_VOCAB_BLOCK", 1)
    monkeypatch.setitem(lp_mod.VOCAB_BLOCK, "cpu", 16)


def assert_all_close(got, want, tol):
    names = ("logp", "entropy", "grad hidden", "grad weight", "grad bias")
    for name, g, w in zip(names, got, want):
        if g is None or w is None:
            continue
        torch.testing.assert_close(g.double(), w.double(), rtol=tol, atol=tol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("tiles", ["default", "small"])
@pytest.mark.parametrize("chunk_size", [None, 3, 5, 14, 100])
@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_values_and_gradients_match_the_naive_path_in_float32(request, tiles, chunk_size, temperature):
    if tiles == "small":
        request.getfixturevalue("small_tiles")
    case = make_case(1)
    got = fused(*case[:4], temperature, *case[4:], chunk_size=chunk_size)
    want = naive(*case[:4], temperature, *case[4:])
    assert got[0].dtype == got[1].dtype == torch.float32
    assert (got[0][0, 2], got[0][1, 6]) == (0.0, 0.0)  # ignored labels
    assert_all_close(got, want, 1e-5)


@pytest.mark.usefixtures("small_tiles")
@pytest.mark.parametrize("use_bias", [False, True])
def test_logprobs_only_and_entropy_only_gradients_match(use_bias):
    hidden, weight, bias, labels, w_logp, w_ent = make_case(2, use_bias=use_bias)
    got = fused(hidden, weight, bias, labels, 0.8, w_logp, w_ent, with_entropy=False, chunk_size=4)
    want = naive(hidden, weight, bias, labels, 0.8, w_logp, w_ent, with_entropy=False)
    assert_all_close(got, want, 1e-5)
    # entropy alone: the log-prob output gets no gradient
    got = fused(hidden, weight, bias, labels, 0.8, torch.zeros_like(w_logp), w_ent, chunk_size=4)
    h, w, b = leaves(hidden, weight, bias)
    _, ent = logprobs_from_hidden(h, w, labels, 0.8, return_entropy=True, chunk_size=4, bias=b)
    (ent.double() * w_ent).sum().backward()
    assert_all_close((None, None, h.grad, w.grad, None if b is None else b.grad), got, 1e-6)


def test_float64_matches_to_rounding():
    case = make_case(3, dtype=torch.float64)
    assert_all_close(fused(*case[:4], 0.9, *case[4:], chunk_size=5), naive(*case[:4], 0.9, *case[4:]), 1e-12)


@pytest.mark.parametrize("tiles", ["default", "small"])
def test_bfloat16_inputs_match_within_bfloat16_rounding(request, tiles):
    if tiles == "small":
        request.getfixturevalue("small_tiles")
    case = make_case(4, dtype=torch.bfloat16)
    got = fused(*case[:4], 0.7, *case[4:], chunk_size=3)
    assert got[0].dtype == torch.float32 and got[2].dtype == got[3].dtype == torch.bfloat16
    # the oracle sees the same bf16-rounded inputs; the fused path rounds its logits (and the logit
    # gradients fed to the matmuls) to bf16, so allow a few bf16 ulps of the O(1) values
    assert_all_close(got, naive(*case[:4], 0.7, *case[4:]), 4e-2)


def test_cpu_autocast_runs_the_matmuls_in_bfloat16_and_keeps_float32_gradients():
    hidden, weight, bias, labels, w_logp, w_ent = make_case(5)
    h, w = leaves(hidden, weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logp, ent = logprobs_from_hidden(h, w, labels, return_entropy=True, chunk_size=4)
    ((logp.double() * w_logp).sum() + (ent.double() * w_ent).sum()).backward()
    assert logp.dtype == torch.float32 and h.grad.dtype == w.grad.dtype == torch.float32
    want = naive(hidden, weight, None, labels, 1.0, w_logp, w_ent)
    assert_all_close((logp, ent, h.grad, w.grad), want, 4e-2)


@pytest.mark.usefixtures("small_tiles")
def test_gradcheck_in_float64():
    g = torch.Generator().manual_seed(6)
    hidden = torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(9, 3, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(9, dtype=torch.float64, generator=g, requires_grad=True)
    labels = torch.tensor([0, 8, IGNORE, 4, 4])

    def f(h, w, b):
        return logprobs_from_hidden(h, w, labels, 0.7, return_entropy=True, chunk_size=2, bias=b)

    assert torch.autograd.gradcheck(f, (hidden, weight, bias))


def test_result_does_not_depend_on_the_chunk_size(small_tiles):
    case = make_case(7, dtype=torch.float64)
    ref = fused(*case[:4], 1.3, *case[4:], chunk_size=1)
    for chunk in (2, 3, 13, 14, 1000):
        assert_all_close(fused(*case[:4], 1.3, *case[4:], chunk_size=chunk), ref, 1e-12)


@pytest.mark.usefixtures("small_tiles")
@pytest.mark.parametrize("scale", [1e2, 1e3])  # hidden x scale -> logits up to ~1e4 (and / 0.3)
@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_hostile_logits_give_finite_values_and_gradients(scale, temperature):
    hidden, weight, bias, labels, w_logp, w_ent = make_case(8, scale=scale)
    logp, ent, gh, gw, gb = fused(hidden, weight, bias, labels, temperature, w_logp, w_ent, chunk_size=3)
    assert max(hidden.abs().max() * weight.abs().sum(1).max() / temperature, 0) > 1e3
    for x in (logp, ent, gh, gw, gb):
        assert torch.isfinite(x).all()
    assert (logp <= 0).all()
    assert (ent >= -1e-3).all() and (ent <= torch.log(torch.tensor(float(V))) + 1e-3).all()
    want = naive(hidden, weight, bias, labels, temperature, w_logp, w_ent)
    # |z| ~ 1e4 carries float32 rounding of ~1e-3 absolute into every logit
    torch.testing.assert_close(logp.double(), want[0], rtol=1e-4, atol=2e-2)
    torch.testing.assert_close(ent.double(), want[1], rtol=1e-4, atol=2e-2)


@pytest.mark.usefixtures("small_tiles")
def test_banned_tokens_with_minus_inf_bias_are_excluded_not_nan():
    hidden, weight, bias, labels, w_logp, w_ent = make_case(9)
    banned = torch.zeros(V, dtype=torch.bool)
    banned[::3] = True
    banned[32:48] = True  # a whole vocabulary block of -inf
    bias = bias.masked_fill(banned, float("-inf"))
    labels = torch.where(banned[labels.clamp(min=0)] & (labels >= 0), 1, labels)
    got = fused(hidden, weight, bias, labels, 0.9, w_logp, w_ent, chunk_size=4)
    keep = ~banned
    remap = torch.cumsum(keep.long(), 0) - 1
    sub = naive(hidden, weight[keep], bias[keep], torch.where(labels >= 0, remap[labels.clamp(min=0)], labels),
                0.9, w_logp, w_ent)
    assert_all_close(got[:3], sub[:3], 1e-5)
    torch.testing.assert_close(got[3][keep].double(), sub[3], rtol=1e-5, atol=1e-5)
    assert (got[3][banned] == 0).all() and (got[4][banned] == 0).all()


def test_frozen_head_and_no_tokens():
    hidden, weight, bias, labels, w_logp, w_ent = make_case(10)
    h = hidden.clone().requires_grad_(True)
    logp = logprobs_from_hidden(h, weight, labels, chunk_size=4, bias=bias)
    (logp.double() * w_logp).sum().backward()
    want = naive(hidden, weight, bias, labels, 1.0, w_logp, w_ent, with_entropy=False)
    torch.testing.assert_close(h.grad.double(), want[2], rtol=1e-5, atol=1e-5)

    w = weight.clone().requires_grad_(True)
    logp, ent = logprobs_from_hidden(torch.zeros(0, H), w, torch.zeros(0, dtype=torch.long),
                                     return_entropy=True)
    assert logp.shape == ent.shape == (0,)
    (logp.sum() + ent.sum()).backward()
    assert (w.grad == 0).all()


class _RecordShapes(TorchDispatchMode):
    """Records the shape of every tensor every aten op returns, forward and backward alike."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(x, torch.Tensor):
                self.shapes.append(tuple(x.shape))
        return out


def largest_token_by_vocab_tensor(run, vocab, hdim):
    """Most elements of any op output in ``run`` other than weight-shaped ``[V, H]`` (or transposed) ones."""
    rec = _RecordShapes()
    with rec:
        run()
    sizes = [torch.Size(s).numel() for s in rec.shapes if s not in ((vocab, hdim), (hdim, vocab))]
    return max(sizes)


def test_logits_never_exist_whole_in_forward_or_backward():
    n, vocab, hdim, chunk = 256, 3000, 8, 4
    g = torch.Generator().manual_seed(11)
    hidden = torch.randn(n, hdim, generator=g, requires_grad=True)
    weight = torch.randn(vocab, hdim, generator=g, requires_grad=True)
    labels = torch.randint(0, vocab, (n,), generator=g)

    def run_fused():
        logp, ent = logprobs_from_hidden(hidden, weight, labels, 0.7, return_entropy=True, chunk_size=chunk)
        (logp.sum() + ent.sum()).backward()

    def run_naive():
        logp_all = torch.log_softmax(hidden @ weight.T / 0.7, -1)
        logp_all.gather(-1, labels[:, None]).sum().backward()

    assert largest_token_by_vocab_tensor(run_naive, vocab, hdim) >= n * vocab  # the probe sees them
    assert largest_token_by_vocab_tensor(run_fused, vocab, hdim) <= chunk * vocab
    assert hidden.grad is not None and weight.grad is not None
