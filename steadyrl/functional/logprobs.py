"""Token log-probabilities and entropies without a float32 copy of the whole ``[B, T, V]`` logits.

For a token with logits ``z`` (already divided by the sampling temperature ``tau``) and label ``y``:

    logp   = z[y] - logsumexp(z)
    H      = logsumexp(z) - sum_v p_v z_v,        p = softmax(z)
    dlogp/dz_v = onehot(y)_v - p_v
    dH/dz_v    = -p_v (z_v - sum_u p_u z_u)

Both entry points work on chunks of rows (tokens) and recompute each chunk in the backward pass
from what the forward already holds, so at most one chunk of float32 logits exists at a time:

* :func:`logprobs_from_logits` / :func:`entropy_from_logits` take the model's logits (any float
  dtype). The gradient is written in the logits' own dtype, chunk by chunk.
* :func:`logprobs_from_hidden` takes the last hidden states and the LM-head weight instead, so the
  ``[B, T, V]`` logits never exist at all, in either pass: ``z = hidden @ weight.T / tau`` is formed
  one chunk at a time, and the backward pass accumulates the weight gradient in float32.

Labels below 0 (``ignore_index``, -100 by default) give log-prob 0 and no gradient.
"""

from __future__ import annotations

import torch

from .stats import acc_dtype

__all__ = [
    "DEFAULT_CHUNK_ELEMENTS",
    "logprobs_from_logits",
    "entropy_from_logits",
    "logprobs_and_entropy_from_logits",
    "logprobs_from_hidden",
]

DEFAULT_CHUNK_ELEMENTS = 2**25
"""Default float32 working set of one chunk: 2**25 values (128 MiB), i.e. ~220 tokens at V=151,936."""


def _chunk_rows(num_rows: int, vocab: int, chunk_size: int | None) -> int:
    if chunk_size is not None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 token, got {chunk_size}")
        return chunk_size
    return max(1, min(num_rows, DEFAULT_CHUNK_ELEMENTS // max(vocab, 1)))


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _chunk_forward(z: torch.Tensor, labels: torch.Tensor, want_entropy: bool):
    """Log-probs of ``labels``, logsumexp and (optionally) entropy of float32 logits ``z [c, V]``."""
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(1, labels.clamp(min=0).unsqueeze(1)).squeeze(1) - lse
    entropy = None
    if want_entropy:
        p = torch.exp(z - lse.unsqueeze(1))
        # p * z is 0 where p underflows to 0, even if z is -inf (a banned token).
        pz = torch.where(p > 0, p * z, torch.zeros((), dtype=z.dtype, device=z.device))
        entropy = lse - pz.sum(-1)
    return logp, lse, entropy


def _chunk_grad_z(z, lse, labels, g_logp, g_entropy, temperature):
    """d(loss)/d(logits) for one chunk, in float32, given upstream grads of logp and entropy."""
    p = torch.exp(z - lse.unsqueeze(1))
    grad = torch.zeros_like(z)
    if g_logp is not None:
        g = torch.where(labels >= 0, g_logp.to(z.dtype), torch.zeros((), dtype=z.dtype, device=z.device))
        grad -= p * g.unsqueeze(1)
        grad.scatter_add_(1, labels.clamp(min=0).unsqueeze(1), g.unsqueeze(1))
    if g_entropy is not None:
        zero = torch.zeros((), dtype=z.dtype, device=z.device)
        mean_z = torch.where(p > 0, p * z, zero).sum(-1, keepdim=True)
        grad -= torch.where(p > 0, p * (z - mean_z), zero) * g_entropy.to(z.dtype).unsqueeze(1)
    if temperature != 1.0:
        grad /= temperature
    return grad


def _finish(logp, labels):
    return torch.where(labels >= 0, logp, torch.zeros((), dtype=logp.dtype, device=logp.device))


class _FromLogits(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, temperature, rows, want_entropy):
        n, dt = logits.shape[0], acc_dtype(logits)
        logp = logits.new_empty(n, dtype=dt)
        lse = logits.new_empty(n, dtype=dt)
        entropy = logits.new_empty(n, dtype=dt) if want_entropy else None
        for s in range(0, n, rows):
            z = logits[s : s + rows].to(dt) / temperature
            lp, ls, ent = _chunk_forward(z, labels[s : s + rows], want_entropy)
            logp[s : s + rows], lse[s : s + rows] = lp, ls
            if want_entropy:
                entropy[s : s + rows] = ent
        ctx.save_for_backward(logits, labels, lse)
        ctx.temperature, ctx.rows = temperature, rows
        logp = _finish(logp, labels)
        return (logp, entropy) if want_entropy else (logp, logp.new_zeros(0))

    @staticmethod
    def backward(ctx, g_logp, g_entropy):
        logits, labels, lse = ctx.saved_tensors
        if g_entropy is not None and g_entropy.numel() == 0:
            g_entropy = None
        grad = torch.empty_like(logits)
        rows = ctx.rows
        for s in range(0, logits.shape[0], rows):
            z = logits[s : s + rows].to(lse.dtype) / ctx.temperature
            gz = _chunk_grad_z(
                z,
                lse[s : s + rows],
                labels[s : s + rows],
                None if g_logp is None else g_logp[s : s + rows],
                None if g_entropy is None else g_entropy[s : s + rows],
                ctx.temperature,
            )
            grad[s : s + rows] = gz.to(logits.dtype)
        return grad, None, None, None, None


def _flatten_logits(logits: torch.Tensor, labels: torch.Tensor | None):
    if logits.dim() < 2:
        raise ValueError(f"logits must be [..., V], got shape {tuple(logits.shape)}")
    lead = logits.shape[:-1]
    if labels is not None and labels.shape != lead:
        raise ValueError(
            f"labels shape {tuple(labels.shape)} must equal logits shape without the vocab "
            f"dimension {tuple(lead)}"
        )
    flat = logits.reshape(-1, logits.shape[-1])
    if labels is None:
        labels = torch.zeros(lead, dtype=torch.long, device=logits.device)
    return flat, labels.reshape(-1).long(), lead


def logprobs_and_entropy_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p(labels), entropy)`` of ``softmax(logits / temperature)``, both ``[...]`` float32.

    One pass over the logits for both. See the module docstring for the formulas.
    """
    _check_temperature(temperature)
    flat, flat_labels, lead = _flatten_logits(logits, labels)
    rows = _chunk_rows(flat.shape[0], flat.shape[1], chunk_size)
    logp, entropy = _FromLogits.apply(flat, flat_labels, float(temperature), rows, True)
    return logp.reshape(lead), entropy.reshape(lead)


def logprobs_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """``log softmax(logits / temperature)[labels]`` -> ``[B, T]`` float32 (float64 for float64 logits).

    ``logp = z[y] - logsumexp(z)`` with ``z = logits / temperature`` taken in float32 one chunk of
    tokens at a time, so a bf16 ``[B, T, V]`` input is never copied whole to float32, in the forward
    or the backward pass. Labels < 0 give 0.
    """
    _check_temperature(temperature)
    flat, flat_labels, lead = _flatten_logits(logits, labels)
    rows = _chunk_rows(flat.shape[0], flat.shape[1], chunk_size)
    logp, _ = _FromLogits.apply(flat, flat_labels, float(temperature), rows, False)
    return logp.reshape(lead)


def entropy_from_logits(
    logits: torch.Tensor, temperature: float = 1.0, chunk_size: int | None = None
) -> torch.Tensor:
    """Entropy ``H = logsumexp(z) - sum_v softmax(z)_v z_v`` of ``z = logits / temperature``.

    Returns ``[B, T]`` float32, computed one chunk of tokens at a time.
    """
    _check_temperature(temperature)
    flat, flat_labels, lead = _flatten_logits(logits, None)
    rows = _chunk_rows(flat.shape[0], flat.shape[1], chunk_size)
    _, entropy = _FromLogits.apply(flat, flat_labels, float(temperature), rows, True)
    return entropy.reshape(lead)


class _FromHidden(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, temperature, rows, want_entropy):
        n, dt = hidden.shape[0], acc_dtype(hidden)
        logp = hidden.new_empty(n, dtype=dt)
        lse = hidden.new_empty(n, dtype=dt)
        entropy = hidden.new_empty(n, dtype=dt) if want_entropy else None
        for s in range(0, n, rows):
            z = torch.nn.functional.linear(hidden[s : s + rows], weight, bias).to(dt) / temperature
            lp, ls, ent = _chunk_forward(z, labels[s : s + rows], want_entropy)
            logp[s : s + rows], lse[s : s + rows] = lp, ls
            if want_entropy:
                entropy[s : s + rows] = ent
        ctx.save_for_backward(hidden, weight, bias, labels, lse)
        ctx.temperature, ctx.rows = temperature, rows
        logp = _finish(logp, labels)
        return (logp, entropy) if want_entropy else (logp, logp.new_zeros(0))

    @staticmethod
    def backward(ctx, g_logp, g_entropy):
        hidden, weight, bias, labels, lse = ctx.saved_tensors
        if g_entropy is not None and g_entropy.numel() == 0:
            g_entropy = None
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        dt = lse.dtype
        grad_w = torch.zeros(weight.shape, dtype=dt, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=dt, device=bias.device) if need_b else None
        rows = ctx.rows
        for s in range(0, hidden.shape[0], rows):
            h = hidden[s : s + rows]
            z = torch.nn.functional.linear(h, weight, bias).to(dt) / ctx.temperature
            gz = _chunk_grad_z(
                z,
                lse[s : s + rows],
                labels[s : s + rows],
                None if g_logp is None else g_logp[s : s + rows],
                None if g_entropy is None else g_entropy[s : s + rows],
                ctx.temperature,
            ).to(weight.dtype)
            if need_h:
                grad_h[s : s + rows] = (gz @ weight).to(hidden.dtype)
            if need_w:
                grad_w += (gz.t() @ h.to(weight.dtype)).to(dt)
            if need_b:
                grad_b += gz.to(dt).sum(0)
        grad_w = grad_w.to(weight.dtype) if need_w else None
        grad_b = grad_b.to(bias.dtype) if need_b else None
        return grad_h, grad_w, grad_b, None, None, None, None


def logprobs_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
    chunk_size: int | None = None,
    bias: torch.Tensor | None = None,
):
    """Log-probs (and optionally entropies) of ``labels`` from last hidden states and LM-head weight.

    ``hidden [..., H]``, ``weight [V, H]`` (``lm_head.weight``), ``labels [...]``. Equivalent to
    ``logprobs_from_logits(hidden @ weight.T + bias, labels, temperature)`` but the logits exist
    only one chunk of ``chunk_size`` tokens at a time, in the forward and in the backward pass
    (which recomputes each chunk). The matmul runs in the inputs' dtype, the softmax in float32,
    and the weight gradient is accumulated over chunks in float32.

    Returns ``logp [...]`` float32, or ``(logp, entropy)`` with ``return_entropy=True``.
    """
    _check_temperature(temperature)
    if hidden.shape[-1] != weight.shape[-1]:
        raise ValueError(
            f"hidden size {hidden.shape[-1]} does not match weight shape {tuple(weight.shape)} "
            "(expected weight [V, H])"
        )
    lead = hidden.shape[:-1]
    if labels.shape != lead:
        raise ValueError(f"labels shape {tuple(labels.shape)} must equal hidden shape {tuple(lead)}")
    flat_h = hidden.reshape(-1, hidden.shape[-1])
    flat_labels = labels.reshape(-1).long()
    rows = _chunk_rows(flat_h.shape[0], weight.shape[0], chunk_size)
    logp, entropy = _FromHidden.apply(
        flat_h, weight, bias, flat_labels, float(temperature), rows, return_entropy
    )
    logp = logp.reshape(lead)
    return (logp, entropy.reshape(lead)) if return_entropy else logp
