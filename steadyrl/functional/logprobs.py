"""Token log-probabilities and entropies without a float32 copy of the whole ``[B, T, V]`` logits.

For a token with logits ``z`` (already divided by the sampling temperature ``tau``) and label ``y``,
with ``m = max(z)``, ``S = sum_v exp(z_v - m)`` and ``lse = m + log S``:

    logp   = (z[y] - m) - log S
    H      = log S - sum_v p_v (z_v - m),         p = softmax(z)
    dlogp/dz_v = onehot(y)_v - p_v
    dH/dz_v    = -p_v (z_v - sum_u p_u z_u) = -p_v (z_v - lse + H)

Everything is taken relative to the row max ``m``, so the entropy never subtracts two numbers of
the size of the logits (``lse - sum p z`` loses every digit in float32 when ``|z| ~ 1e4``).

Both entry points stream over tiles of ``rows`` tokens by ``cols`` vocabulary entries and
recompute each tile in the backward pass from the per-token statistics the forward pass saved, so
the only ``[tokens, V]``-shaped memory is one tile (and a few of its float32 copies):

* :func:`logprobs_from_logits` / :func:`entropy_from_logits` take the model's logits (any float
  dtype); a tile is whole rows (``cols = V``). The gradient is written in the logits' own dtype.
* :func:`logprobs_from_hidden` takes the last hidden states and the LM-head weight instead, so the
  ``[B, T, V]`` logits never exist at all, in either pass. A tile is ``hidden[rows] @ weight[cols].T``;
  across the vocabulary blocks of a token the forward pass merges ``(m, S, T)`` online:

      m' = max(m, m_b),  S' = S e^(m - m') + S_b e^(m_b - m'),
      T' = e^(m - m') (T + (m - m') S) + e^(m_b - m') (T_b + (m_b - m') S_b),   T = sum e^(z-m) (z-m)

  so ``H = log S - T / S``. The backward pass walks the vocabulary blocks in the outer loop, so a
  block of the weight and of its float32 gradient stay in cache while the token chunks stream
  past; the weight gradient is accumulated in float32 with ``addmm_``, without a zero fill.

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

DEFAULT_CHUNK_ELEMENTS = 2**23
"""Working set of one tile on CPU: 2**23 float32 values (32 MiB), i.e. 2,048 tokens x 4,096 vocabulary
entries for :func:`logprobs_from_hidden`, or ~55 whole rows at V = 151,936 for the logits path. The
tile buffers are allocated once per call and reused, so no tile page-faults fresh memory. 2**21 to
2**24 measured within noise of each other on an idle CPU; the larger tiles run ~4x fewer (threaded)
ops than 2**21, which matters when other processes share the cores. See BENCHMARKS.md."""

ACCELERATOR_CHUNK_ELEMENTS = 2**25
"""Working set of one tile on an accelerator (128 MiB float32): fewer, larger kernels."""

VOCAB_BLOCK = {"cpu": 4096}
"""Default vocabulary columns of a :func:`logprobs_from_hidden` tile, per device type."""
ACCELERATOR_VOCAB_BLOCK = 8192
MIN_VOCAB_BLOCK = 256
"""Fewest vocabulary columns of a tile when ``chunk_size`` asks for many tokens (matmul efficiency)."""


def check_hidden_shapes(hidden, weight, bias, labels) -> torch.Size:
    """``hidden [..., H]``, ``weight [V, H]``, ``bias [V]`` or None, ``labels [...]`` agree; returns ``[...]``."""
    if hidden.shape[-1] != weight.shape[-1] or weight.dim() != 2:
        raise ValueError(
            f"hidden size {hidden.shape[-1]} does not match weight shape {tuple(weight.shape)} "
            "(expected weight [V, H])"
        )
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"bias shape {tuple(bias.shape)} must be [V] = {tuple(weight.shape[:1])}")
    lead = hidden.shape[:-1]
    if labels.shape != lead:
        raise ValueError(f"labels shape {tuple(labels.shape)} must equal hidden shape {tuple(lead)}")
    return lead


def check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _tile_shape(n: int, v: int, chunk_size: int | None, device: torch.device, whole_rows: bool):
    """``(rows, cols)`` of a tile over ``n`` tokens and ``v`` vocabulary entries."""
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 token, got {chunk_size}")
    cpu = device.type == "cpu"
    budget = DEFAULT_CHUNK_ELEMENTS if cpu else ACCELERATOR_CHUNK_ELEMENTS
    block = v if whole_rows else min(v, VOCAB_BLOCK.get(device.type, ACCELERATOR_VOCAB_BLOCK))
    rows = chunk_size if chunk_size is not None else max(1, budget // max(block, 1))
    rows = max(1, min(rows, n))
    cols = v if whole_rows else min(v, max(MIN_VOCAB_BLOCK, budget // rows))
    return rows, max(cols, 1)


def _label_slots(labels: torch.Tensor, v0: int, v1: int):
    """``(in_block, column)`` of each label in the vocabulary block ``[v0, v1)``."""
    in_block = (labels >= v0) & (labels < v1)
    return in_block, (labels - v0).clamp(0, v1 - v0 - 1).unsqueeze(1)


def _tile_stats(z, work, want_entropy: bool, mask_inf: bool):
    """Row max ``m``, ``S = sum e^(z-m)`` and ``T = sum e^(z-m) (z-m)`` of a tile; ``z`` is overwritten.

    ``work`` is a scratch tile of the same shape. ``mask_inf`` makes ``0 * -inf`` terms (banned
    tokens) count as 0 instead of NaN.
    """
    m = z.amax(1).clamp_(min=torch.finfo(z.dtype).min)  # a block of only -inf stays finite
    z.sub_(m.unsqueeze(1))
    e = torch.exp(z, out=work)
    s = e.sum(1)
    if not want_entropy:
        return m, s, None
    ez = e.mul_(z)
    if mask_inf:  # e = 0 exactly where z - m = -inf; NaN inputs already made m and S NaN
        ez.nan_to_num_(0.0)
    return m, s, ez.sum(1)


def _merge_stats(run, r0, r1, tile, first: bool, want_entropy: bool) -> None:
    """Fold one vocabulary block's ``(m, S, T)`` into the running statistics of rows ``r0:r1``."""
    m_b, s_b, t_b = tile
    m, s, t = (x[r0:r1] if x is not None else None for x in run)
    if first:
        m.copy_(m_b), s.copy_(s_b)
        if want_entropy:
            t.copy_(t_b)
        return
    m_new = torch.maximum(m, m_b)
    a, a_b = torch.exp(m - m_new), torch.exp(m_b - m_new)
    if want_entropy:
        t.copy_(a * (t + (m - m_new) * s) + a_b * (t_b + (m_b - m_new) * s_b))
    s.copy_(a * s + a_b * s_b)
    m.copy_(m_new)


def _forward(n, v, rows, cols, make_tile, labels, want_entropy, mask_inf, dt, device):
    """Stream all tiles once; return ``(logp, entropy or None, m, log S)`` per token."""
    m = torch.empty(n, dtype=dt, device=device)
    s, zy = torch.empty_like(m), torch.zeros_like(m)
    t = torch.empty_like(m) if want_entropy else None
    work = torch.empty(rows * cols, dtype=dt, device=device)
    for v0 in range(0, v, cols):
        v1 = min(v, v0 + cols)
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            z = make_tile(r0, r1, v0, v1)
            in_block, col = _label_slots(labels[r0:r1], v0, v1)
            zy[r0:r1] = torch.where(in_block, z.gather(1, col).squeeze(1), zy[r0:r1])
            stats = _tile_stats(z, work[: z.numel()].view_as(z), want_entropy, mask_inf)
            _merge_stats((m, s, t), r0, r1, stats, v0 == 0, want_entropy)
    log_s = s.log()
    logp = torch.where(labels >= 0, (zy - m) - log_s, 0.0)
    entropy = log_s - t / s if want_entropy else None
    return logp, entropy, m, log_s


def _tile_grad(z, work, m, log_s, a, b, c, mask_inf: bool):
    """``d loss / d z`` of a tile without the one-hot term, in place in ``z``.

    With ``u = z - lse`` (log p): ``grad = a (onehot - p) - b p (u + H) = a onehot + p (-b u - c)``,
    ``c = a + b H``; ``a``, ``b`` are the upstream gradients of logp and H over the temperature.
    """
    u = z.sub_(m.unsqueeze(1)).sub_(log_s.unsqueeze(1))
    p = torch.exp(u, out=work)
    if b is None:
        return p.mul_(-a.unsqueeze(1))
    grad = u.mul_(-b.unsqueeze(1)).sub_(c.unsqueeze(1)).mul_(p)
    return grad.masked_fill_(p == 0, 0.0) if mask_inf else grad


def _backward(saved, v, rows, cols, make_tile, sink, g_logp, g_entropy, temperature, mask_inf):
    """Stream all tiles again, vocabulary blocks outermost, handing each tile's gradient to ``sink``."""
    labels, m, log_s, entropy = saved
    n, dt = labels.shape[0], m.dtype
    zero = torch.zeros((), dtype=dt, device=m.device)
    a = zero.expand(n) if g_logp is None else torch.where(labels >= 0, g_logp.to(dt), zero) / temperature
    b = None if g_entropy is None else g_entropy.to(dt) / temperature
    c = None if b is None else a + b * entropy
    work = torch.empty(rows * cols, dtype=dt, device=m.device)
    for v0 in range(0, v, cols):
        v1 = min(v, v0 + cols)
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            z = make_tile(r0, r1, v0, v1)
            rs = slice(r0, r1)
            grad = _tile_grad(z, work[: z.numel()].view_as(z), m[rs], log_s[rs], a[rs],
                              None if b is None else b[rs], None if c is None else c[rs], mask_inf)
            if g_logp is not None:
                in_block, col = _label_slots(labels[rs], v0, v1)
                grad.scatter_add_(1, col, torch.where(in_block, a[rs], zero).unsqueeze(1))
            sink(r0, r1, v0, v1, grad)


class _LogitsTiles:
    """Tiles of float32 (or float64) ``logits / temperature`` and the gradient written back."""

    def __init__(self, logits, temperature, rows, cols, dt):
        self.logits, self.temperature, self.dt = logits, temperature, dt
        self.buf = torch.empty(rows * cols, dtype=dt, device=logits.device)
        self.grad = None

    def __call__(self, r0, r1, v0, v1):
        src = self.logits[r0:r1, v0:v1]
        z = self.buf[: src.numel()].view(src.shape).copy_(src)
        return z.div_(self.temperature) if self.temperature != 1.0 else z

    def sink(self, r0, r1, v0, v1, grad):
        if self.grad is None:
            self.grad = torch.empty_like(self.logits)
        self.grad[r0:r1, v0:v1] = grad


class _FromLogits(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, temperature, rows, want_entropy):
        ctx.set_materialize_grads(False)
        n, v = logits.shape
        dt = acc_dtype(logits)
        tiles = _LogitsTiles(logits, temperature, rows, v, dt)
        logp, entropy, m, log_s = _forward(n, v, rows, v, tiles, labels, want_entropy, True, dt, logits.device)
        ctx.save_for_backward(logits, labels, m, log_s, entropy if want_entropy else m)
        ctx.temperature, ctx.rows = temperature, rows
        return (logp, entropy) if want_entropy else (logp, logp.new_zeros(0))

    @staticmethod
    def backward(ctx, g_logp, g_entropy):
        logits, labels, m, log_s, entropy = ctx.saved_tensors
        if g_entropy is not None and g_entropy.numel() == 0:
            g_entropy = None
        if g_logp is None and g_entropy is None:
            return None, None, None, None, None
        v = logits.shape[1]
        tiles = _LogitsTiles(logits, ctx.temperature, ctx.rows, v, m.dtype)
        _backward((labels, m, log_s, entropy), v, ctx.rows, v, tiles, tiles.sink, g_logp, g_entropy,
                  ctx.temperature, True)
        return tiles.grad, None, None, None, None


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


def _from_logits(logits, labels, temperature, chunk_size, want_entropy):
    check_temperature(temperature)
    flat, flat_labels, lead = _flatten_logits(logits, labels)
    rows, _ = _tile_shape(flat.shape[0], flat.shape[1], chunk_size, flat.device, whole_rows=True)
    logp, entropy = _FromLogits.apply(flat, flat_labels, float(temperature), rows, want_entropy)
    return logp.reshape(lead), (entropy.reshape(lead) if want_entropy else None)


def logprobs_and_entropy_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p(labels), entropy)`` of ``softmax(logits / temperature)``, both ``[...]`` float32.

    One pass over the logits for both. See the module docstring for the formulas.
    """
    return _from_logits(logits, labels, temperature, chunk_size, True)


def logprobs_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """``log softmax(logits / temperature)[labels]`` -> ``[B, T]`` float32 (float64 for float64 logits).

    ``logp = (z[y] - m) - log sum exp(z - m)`` with ``z = logits / temperature`` taken in float32
    ``chunk_size`` tokens at a time, so a bf16 ``[B, T, V]`` input is never copied whole to float32,
    in the forward or the backward pass. Labels < 0 give 0.
    """
    return _from_logits(logits, labels, temperature, chunk_size, False)[0]


def entropy_from_logits(
    logits: torch.Tensor, temperature: float = 1.0, chunk_size: int | None = None
) -> torch.Tensor:
    """Entropy ``H = log S - sum_v p_v (z_v - m)`` of ``z = logits / temperature`` (``m`` = row max).

    Returns ``[B, T]`` float32, computed one chunk of tokens at a time.
    """
    return _from_logits(logits, None, temperature, chunk_size, True)[1]


def mm_into(out, a, b, first: bool) -> None:
    """``out = a @ b`` (``first``) or ``out += a @ b``, ``out`` in the accumulation dtype."""
    if a.dtype == out.dtype:
        if first:
            torch.mm(a, b, out=out)
        else:
            out.addmm_(a, b)
    elif first:
        out.copy_(torch.mm(a, b))
    else:
        out.add_(torch.mm(a, b))


class _HiddenTiles:
    """Tiles ``(hidden[rows] @ weight[cols].T + bias[cols]) / temperature`` in the accumulation dtype,
    and the sink that turns each tile's gradient into hidden, weight and bias gradients."""

    def __init__(self, hidden, weight, bias, temperature, rows, cols, cdt, dt):
        self.h, self.w = hidden.to(cdt), weight.to(cdt)
        self.b = None if bias is None else bias.to(cdt)
        self.temperature, self.dt = temperature, dt
        self.mm_buf = torch.empty(rows * cols, dtype=cdt, device=hidden.device)
        self.acc_buf = None if cdt == dt else torch.empty(rows * cols, dtype=dt, device=hidden.device)
        self.gh = self.gw = self.gb = None

    def __call__(self, r0, r1, v0, v1):
        out = self.mm_buf[: (r1 - r0) * (v1 - v0)].view(r1 - r0, v1 - v0)
        h, w = self.h[r0:r1], self.w[v0:v1]
        if self.b is None:
            torch.mm(h, w.t(), out=out)
        else:
            torch.addmm(self.b[v0:v1], h, w.t(), out=out)
        z = out if self.acc_buf is None else self.acc_buf[: out.numel()].view_as(out).copy_(out)
        return z.div_(self.temperature) if self.temperature != 1.0 else z

    def start_backward(self, need_h: bool, need_w: bool, need_b: bool) -> None:
        (n, hdim), v = self.h.shape, self.w.shape[0]
        new = torch.empty if n > 0 else torch.zeros  # every entry is written by the first tile
        kw = {"dtype": self.dt, "device": self.h.device}
        self.gh = new(n, hdim, **kw) if need_h else None
        self.gw = new(v, hdim, **kw) if need_w else None
        self.gb = new(v, **kw) if need_b else None

    def sink(self, r0, r1, v0, v1, grad):
        g = grad
        if grad.dtype != self.w.dtype:  # low-precision weights: the matmuls run in their dtype
            g = self.mm_buf[: grad.numel()].view_as(grad).copy_(grad)
        if self.gh is not None:
            mm_into(self.gh[r0:r1], g, self.w[v0:v1], first=v0 == 0)
        if self.gw is not None:
            mm_into(self.gw[v0:v1], g.t(), self.h[r0:r1], first=r0 == 0)
        if self.gb is not None:
            if r0 == 0:
                torch.sum(grad, 0, out=self.gb[v0:v1])
            else:
                self.gb[v0:v1] += grad.sum(0)


class _FromHidden(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, temperature, tile, want_entropy, cdt):
        ctx.set_materialize_grads(False)
        (n, _), v, (rows, cols) = hidden.shape, weight.shape[0], tile
        dt = torch.float64 if cdt == torch.float64 else torch.float32
        mask_inf = bias is not None and bool(torch.isneginf(bias).any())
        with torch.autocast(hidden.device.type, enabled=False):
            tiles = _HiddenTiles(hidden, weight, bias, temperature, rows, cols, cdt, dt)
            logp, entropy, m, log_s = _forward(n, v, rows, cols, tiles, labels, want_entropy, mask_inf,
                                               dt, hidden.device)
        ctx.save_for_backward(hidden, weight, bias, labels, m, log_s, entropy if want_entropy else m)
        ctx.args = (temperature, rows, cols, cdt, dt, mask_inf)
        return logp, (entropy if want_entropy else logp.new_zeros(0))

    @staticmethod
    def backward(ctx, g_logp, g_entropy):
        hidden, weight, bias, labels, m, log_s, entropy = ctx.saved_tensors
        temperature, rows, cols, cdt, dt, mask_inf = ctx.args
        if g_entropy is not None and g_entropy.numel() == 0:
            g_entropy = None
        need = ctx.needs_input_grad[:3]
        if (g_logp is None and g_entropy is None) or not any(need):
            return (None,) * 8
        with torch.autocast(hidden.device.type, enabled=False):
            tiles = _HiddenTiles(hidden, weight, bias, temperature, rows, cols, cdt, dt)
            tiles.start_backward(*need)
            _backward((labels, m, log_s, entropy), weight.shape[0], rows, cols, tiles, tiles.sink,
                      g_logp, g_entropy, temperature, mask_inf)
        grads = [None if g is None else g.to(x.dtype)
                 for g, x in zip((tiles.gh, tiles.gw, tiles.gb), (hidden, weight, bias))]
        return (*grads, None, None, None, None, None)


def compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The matmul dtype: autocast's where it is on (as ``F.linear`` would), else the hidden dtype."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device) and hidden.dtype != torch.float64:
        return torch.get_autocast_dtype(device)
    return hidden.dtype


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
    only one tile of ``chunk_size`` tokens by ``DEFAULT_CHUNK_ELEMENTS // chunk_size`` vocabulary
    entries at a time, in the forward and in the backward pass (which recomputes each tile). The
    matmuls run in the inputs' dtype (autocast's where it is enabled), the softmax in float32, and
    the hidden and weight gradients are accumulated over tiles in float32.

    Returns ``logp [...]`` float32, or ``(logp, entropy)`` with ``return_entropy=True``.
    """
    check_temperature(temperature)
    lead = check_hidden_shapes(hidden, weight, bias, labels)
    flat_h = hidden.reshape(-1, hidden.shape[-1])
    flat_labels = labels.reshape(-1).long()
    tile = _tile_shape(flat_h.shape[0], weight.shape[0], chunk_size, hidden.device, whole_rows=False)
    logp, entropy = _FromHidden.apply(
        flat_h, weight, bias, flat_labels, float(temperature), tile, return_entropy, compute_dtype(hidden)
    )
    logp = logp.reshape(lead)
    return (logp, entropy.reshape(lead)) if return_entropy else logp
