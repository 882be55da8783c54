"""Log-probs and entropies from hidden states over whole vocabulary rows, token chunk by token chunk.

:func:`logprobs_from_hidden_rows` has the signature and the values of
:func:`~steadyrl.functional.logprobs.logprobs_from_hidden` (``trainer.logprob_impl: chunked_grad``)
but a different schedule, the one of Liger's fused linear cross-entropy: a chunk is ``rows`` tokens
by the WHOLE vocabulary, so there is no online merge over vocabulary blocks, and each chunk's
float32 work is a few whole-row kernels (``logsumexp``, ``exp``, a product and a sum) instead of a
dozen separate passes over vocabulary blocks. Per token chunk, with ``z = (h W^T + b) / tau``:

    u = log_softmax(z),  p = e^u,  logp = u[y],  H = -sum_v p_v u_v
    d loss / d z = a (onehot(y) - p) - b p (u + H) = a onehot(y) - p (a + b H + b u)

with ``a``, ``b`` the upstream gradients of ``logp`` and ``H``. Banned tokens (``-inf`` bias, so
``p = 0`` and ``u = -inf``) add nothing: ``u`` is clamped to the dtype's lowest value before the
product and their gradient is masked to 0 (only when the bias holds a ``-inf``).

The upstream gradients are unknown in the forward pass (the RL losses are not linear in the
log-probs), so the full gradient cannot be formed there as Liger does for a scalar loss. Two exact
schedules, by what needs a gradient:

* the LM-head weight needs one (full fine-tuning): the forward pass saves ``lse`` per token and the
  backward pass recomputes each chunk ONCE, forming the hidden and the weight gradients from the
  same tile (4 matmuls in all, the least any schedule without ``[N, V]`` storage can do);
* only the hidden states need one (frozen or LoRA head): the gradient is linear in ``(a, b)``, so
  the forward pass computes its two ``[N, H]`` bases ``(onehot - p) W`` and ``-p (u + H) W``, and
  the backward pass is ``(a * base1 + b * base2) / tau``: no recompute at all.

Labels below 0 give log-prob 0 and no gradient. The matmuls run in the inputs' dtype (autocast's
where enabled), the softmax in float32 (float64 for float64 inputs), the weight gradient is
accumulated in float32.
"""

from __future__ import annotations

import torch

from .logprobs import check_temperature, compute_dtype, mm_into, check_hidden_shapes

__all__ = ["logprobs_from_hidden_rows", "ROW_CHUNK_ELEMENTS"]

ROW_CHUNK_ELEMENTS = {"cpu": 2**25}
"""Values of one whole-row chunk per device type: 2**25 (128 MiB in float32) is 220 tokens at
V = 151,936. Every chunk adds its share to the whole ``[V, H]`` float32 weight gradient, so small
chunks pay that read-modify-write many times: on the CPU 2**23 (55 tokens) took twice as long as
2**25 (bf16, 1,024 tokens; BENCHMARKS.md). Accelerators take ``ACCELERATOR_ROW_ELEMENTS``."""
ACCELERATOR_ROW_ELEMENTS = 2**27
"""2**27 values (883 tokens at V = 151,936; 512 MiB per float32 copy, a few copies live): ~37 weight
gradient updates at 32,768 tokens. Not yet measured on a GPU."""


def _rows(n: int, v: int, chunk_size: int | None, device: torch.device) -> int:
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 token, got {chunk_size}")
    budget = ROW_CHUNK_ELEMENTS.get(device.type, ACCELERATOR_ROW_ELEMENTS)
    rows = chunk_size if chunk_size is not None else budget // max(v, 1)
    return max(1, min(rows, max(n, 1)))


class _Chunks:
    """``z = (hidden[r0:r1] @ weight.T + bias) / tau`` in the accumulation dtype ``dt``."""

    def __init__(self, hidden, weight, bias, temperature, cdt, dt):
        self.h, self.w = hidden.to(cdt), weight.to(cdt)
        self.b = None if bias is None else bias.to(cdt)
        self.temperature, self.cdt, self.dt = temperature, cdt, dt

    def logits(self, r0: int, r1: int) -> torch.Tensor:
        h = self.h[r0:r1]
        z = torch.mm(h, self.w.t()) if self.b is None else torch.addmm(self.b, h, self.w.t())
        z = z.to(self.dt)
        return z.div_(self.temperature) if self.temperature != 1.0 else z

    def matmul_dtype(self, g: torch.Tensor) -> torch.Tensor:
        return g if g.dtype == self.cdt else g.to(self.cdt)


def _logit_grad(u, p, labels, a, b, entropy, mask_inf: bool):
    """``a onehot(y) - p (a + b H + b u)`` of a chunk (``u`` = log p; ``a``, ``b`` per token, or None)."""
    if b is None:
        g = p * (-a).unsqueeze(1)
    else:
        coef = torch.addcmul((a + b * entropy).unsqueeze(1), b.unsqueeze(1), u)
        g = coef.mul_(p).neg_()
        if mask_inf:  # u = -inf at banned tokens: 0 * inf
            g.masked_fill_(p == 0, 0.0)
    valid = labels >= 0
    if valid.any():
        g.scatter_add_(1, labels.clamp(min=0).unsqueeze(1), torch.where(valid, a, 0.0).unsqueeze(1))
    return g


class _FromHiddenRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, temperature, rows, want_entropy, cdt, need):
        ctx.set_materialize_grads(False)
        mask_inf = bias is not None and bool(torch.isneginf(bias).any())
        n, v = hidden.shape[0], weight.shape[0]
        dt = torch.float64 if cdt == torch.float64 else torch.float32
        need_h, need_w, need_b = need
        eager = need_h and not (need_w or need_b)  # only the hidden states: gradient bases now
        logp = torch.zeros(n, dtype=dt, device=hidden.device)
        entropy = torch.empty(n, dtype=dt, device=hidden.device) if want_entropy or eager else None
        lse = torch.empty(n, dtype=dt, device=hidden.device)
        bases = torch.empty(2 if want_entropy else 1, n, hidden.shape[1], dtype=dt,
                            device=hidden.device) if eager else None
        with torch.autocast(hidden.device.type, enabled=False):
            ch = _Chunks(hidden, weight, bias, temperature, cdt, dt)
            for r0 in range(0, n, rows):
                r1 = min(n, r0 + rows)
                z = ch.logits(r0, r1)
                lse[r0:r1] = torch.logsumexp(z, 1)
                u = z.sub_(lse[r0:r1].unsqueeze(1))
                y = labels[r0:r1]
                logp[r0:r1] = torch.where(y >= 0, u.gather(1, y.clamp(min=0).unsqueeze(1)).squeeze(1), 0.0)
                if entropy is None:
                    continue
                p = u.exp()
                if mask_inf:  # -inf at banned tokens, where p = 0: 0 * -inf would be NaN
                    u.clamp_(min=torch.finfo(dt).min)
                entropy[r0:r1] = (p * u).sum(1).neg_()
                if eager:
                    _forward_bases(bases, r0, r1, u, p, y, entropy[r0:r1], ch, want_entropy, mask_inf)
        ctx.save_for_backward(hidden, weight, bias, labels, lse, entropy if entropy is not None else lse,
                              bases if eager else lse)
        ctx.args = (temperature, rows, cdt, dt, eager, want_entropy, mask_inf)
        return logp, (entropy if want_entropy else logp.new_zeros(0))

    @staticmethod
    def backward(ctx, g_logp, g_entropy):
        hidden, weight, bias, labels, lse, entropy, bases = ctx.saved_tensors
        temperature, rows, cdt, dt, eager, want_entropy, mask_inf = ctx.args
        if g_entropy is not None and g_entropy.numel() == 0:
            g_entropy = None
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        if (g_logp is None and g_entropy is None) or not (need_h or need_w or need_b):
            return (None,) * 9
        n = labels.shape[0]
        zero = torch.zeros((), dtype=dt, device=lse.device)
        a = zero.expand(n) if g_logp is None else torch.where(labels >= 0, g_logp.to(dt), zero) / temperature
        b = None if g_entropy is None else g_entropy.to(dt) / temperature
        if eager:
            gh = bases[0] * a.unsqueeze(1)
            if b is not None:
                gh.addcmul_(bases[1], b.unsqueeze(1))
            return gh.to(hidden.dtype), None, None, None, None, None, None, None, None
        with torch.autocast(hidden.device.type, enabled=False):
            gh, gw, gb = _backward_recompute(hidden, weight, bias, labels, lse, entropy, a, b,
                                             (temperature, rows, cdt, dt, mask_inf), (need_h, need_w, need_b))
        grads = [None if g is None else g.to(x.dtype) for g, x in zip((gh, gw, gb), (hidden, weight, bias))]
        return (*grads, None, None, None, None, None, None)


def _forward_bases(bases, r0, r1, u, p, y, entropy, ch, want_entropy, mask_inf):
    """The hidden gradient's bases of a chunk, ``(onehot - p) W`` and ``-p (u + H) W`` (the backward's
    ``a`` and ``b`` carry the ``1 / tau``)."""
    one = torch.ones_like(entropy)
    g1 = _logit_grad(u, p, y, one, None, entropy, mask_inf)
    mm_into(bases[0, r0:r1], ch.matmul_dtype(g1), ch.w, first=True)
    if want_entropy:
        g2 = _logit_grad(u, p, y, torch.zeros_like(one), one, entropy, mask_inf)
        mm_into(bases[1, r0:r1], ch.matmul_dtype(g2), ch.w, first=True)


def _backward_recompute(hidden, weight, bias, labels, lse, entropy, a, b, args, need):
    """One pass over the token chunks: recompute ``u``, form the logit gradient, both matmuls."""
    temperature, rows, cdt, dt, mask_inf = args
    need_h, need_w, need_b = need
    n, hdim, v = hidden.shape[0], hidden.shape[1], weight.shape[0]
    ch = _Chunks(hidden, weight, bias, temperature, cdt, dt)
    gh = torch.empty(n, hdim, dtype=dt, device=hidden.device) if need_h else None
    gw = torch.zeros(v, hdim, dtype=dt, device=hidden.device) if need_w else None
    gb = torch.zeros(v, dtype=dt, device=hidden.device) if need_b else None
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        u = ch.logits(r0, r1).sub_(lse[r0:r1].unsqueeze(1))
        p = u.exp()
        g = _logit_grad(u, p, labels[r0:r1], a[r0:r1], None if b is None else b[r0:r1], entropy[r0:r1],
                        mask_inf)
        gm = ch.matmul_dtype(g)
        if gh is not None:
            mm_into(gh[r0:r1], gm, ch.w, first=True)
        if gw is not None:
            mm_into(gw, gm.t(), ch.h[r0:r1], first=False)
        if gb is not None:
            gb += g.sum(0)
    return gh, gw, gb


def logprobs_from_hidden_rows(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
    chunk_size: int | None = None,
    bias: torch.Tensor | None = None,
):
    """:func:`~steadyrl.functional.logprobs_from_hidden`'s values and gradients, whole-row chunks.

    ``hidden [..., H]``, ``weight [V, H]``, ``labels [...]``; ``chunk_size`` tokens per chunk
    (``None``: ``ROW_CHUNK_ELEMENTS // V`` on the CPU). Never holds more than one ``[chunk_size, V]`` chunk
    (and its float32 copies). Returns ``logp [...]`` float32, or ``(logp, entropy)``.
    """
    check_temperature(temperature)
    lead = check_hidden_shapes(hidden, weight, bias, labels)
    flat_h = hidden.reshape(-1, hidden.shape[-1])
    flat_labels = labels.reshape(-1).long()
    rows = _rows(flat_h.shape[0], weight.shape[0], chunk_size, hidden.device)
    grad_on = torch.is_grad_enabled()
    need = tuple(grad_on and x is not None and x.requires_grad for x in (hidden, weight, bias))
    logp, entropy = _FromHiddenRows.apply(flat_h, weight, bias, flat_labels, float(temperature), rows,
                                          return_entropy, compute_dtype(hidden), need)
    logp = logp.reshape(lead)
    return (logp, entropy.reshape(lead)) if return_entropy else logp
