"""Masked reductions, whitening and running moments.

Every function here computes in float32 (float64 when the input is float64), whatever the input
dtype, and returns that accumulation dtype. Masked entries never enter a numerator or a denominator:
they are replaced by zero with ``torch.where`` before any arithmetic, so even NaN or inf padding
cannot leak into a result.
"""

from __future__ import annotations

import math

import torch

from .constants import MASK_EPS, RUNNING_COUNT_INIT, WHITEN_EPS

__all__ = [
    "acc_dtype",
    "masked_sum",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "explained_variance",
    "RunningMoments",
]


def acc_dtype(x: torch.Tensor) -> torch.dtype:
    """The accumulation dtype for ``x``: float64 for float64 input, float32 for everything else."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _as_bool(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def _masked(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` in its accumulation dtype with masked entries set to 0, and the mask in that dtype."""
    dtype = acc_dtype(x)
    keep = _as_bool(mask)
    x = torch.where(keep, x.to(dtype), torch.zeros((), dtype=dtype, device=x.device))
    return x, keep.to(dtype)


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``sum(x * mask)`` over ``dim`` (all dimensions when ``None``), masked entries excluded."""
    x, _ = _masked(x, mask)
    return x.sum() if dim is None else x.sum(dim)


def _mean(x: torch.Tensor, m: torch.Tensor, dim: int | None, keepdim: bool = False) -> torch.Tensor:
    """Masked mean of ``x`` (masked entries already 0) about a shift ``c``, a valid entry:
    ``c + sum(mask * (x - c)) / (n + 1e-8)``.

    Without the shift, ``1e-8`` in the denominator is not absorbed by ``n`` in float64, and the sum
    rounds in float32, so equal values (or a single one) would not have themselves as their mean;
    their "spread" would then be divided by a ~0 std. With it, the mean of equal values is exact.
    """
    keep = m.bool()
    if dim is None:  # reduce everything, as a 1-D tensor
        x, keep, m = x.reshape(-1), keep.reshape(-1), m.reshape(-1)
    d = -1 if dim is None else dim
    lowest = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    shift = torch.where(keep, x.detach(), lowest).amax(d, keepdim=True)
    shift = torch.where(keep.any(d, keepdim=True), shift, torch.zeros_like(shift))
    centered = torch.where(keep, x - shift, torch.zeros((), dtype=x.dtype, device=x.device))
    mean = shift + centered.sum(d, keepdim=True) / (m.sum(d, keepdim=True) + MASK_EPS)
    if dim is None:
        return mean.reshape(())
    return mean if keepdim else mean.squeeze(d)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``sum(x * mask) / (sum(mask) + 1e-8)`` (seed 000), taken about a valid entry so that the
    mean of equal values is exactly that value (see :func:`_mean`).

    With ``dim``, a row whose mask is all zero gives 0, never NaN.
    """
    x, m = _masked(x, mask)
    return _mean(x, m, dim)


def masked_var(
    x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True, dim: int | None = None
) -> torch.Tensor:
    """Variance of the valid entries: ``sum(mask * (x - mean)^2) / (n - 1)`` (``/ n`` if biased).

    ``n`` is the number of valid entries. With ``n <= 1`` the variance is 0 (one value has no
    spread), not NaN and not an error: Bessel's correction is applied only when ``n > 1``.
    """
    x, m = _masked(x, mask)
    n = m.sum() if dim is None else m.sum(dim)
    mean = _mean(x, m, dim, keepdim=True)
    centered = torch.where(m.bool(), x - mean, torch.zeros((), dtype=x.dtype, device=x.device))
    sq = centered.square().sum() if dim is None else centered.square().sum(dim)
    var = sq / (n + MASK_EPS)
    if unbiased:
        bessel = torch.where(n > 1, n / (n - 1).clamp(min=1), torch.ones_like(n))
        var = var * bessel
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """``(x - mean) * rsqrt(var + 1e-8)`` over the valid entries; masked entries come back 0.

    ``mean`` and the unbiased ``var`` are taken over all valid entries of ``x``. With
    ``shift_mean=False`` the mean is added back (only the scale changes). One valid entry gives
    0 (or the entry itself without the shift), never NaN.
    """
    values, m = _masked(x, mask)
    mean = _mean(values, m, None)
    var = masked_var(x, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + WHITEN_EPS)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(m.bool(), whitened, torch.zeros((), dtype=values.dtype, device=x.device))


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``1 - var(returns - values) / var(returns)`` over valid tokens: 1 is a perfect critic,
    0 no better than a constant, negative worse. When the returns do not vary it is 0."""
    var_returns = masked_var(returns, mask)
    var_error = masked_var(returns.to(acc_dtype(returns)) - values.to(acc_dtype(returns)), mask)
    ratio = var_error / var_returns.clamp(min=torch.finfo(var_returns.dtype).tiny)
    return torch.where(var_returns > 0, 1.0 - ratio, torch.zeros_like(ratio))


class RunningMoments:
    """Running mean and standard deviation of everything passed to :meth:`update`.

    Batches are merged with Chan et al.'s parallel formula. ``count`` starts at 1e-24 (seed 000)
    so the first merge never divides by zero; the statistics are Python floats (float64), so the
    object is device-free and its ``state_dict`` is plain data.

    ``std`` is the unbiased standard deviation of all values seen (0 until two have been seen).
    """

    def __init__(self) -> None:
        self.mean: float = 0.0
        self.var: float = 0.0  # biased (population) variance of everything seen
        self.count: float = RUNNING_COUNT_INIT

    @property
    def std(self) -> float:
        n = self.count
        return math.sqrt(self.var * n / (n - 1)) if n > 1 else 0.0

    @torch.no_grad()
    def update(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[float, float]:
        """Merge the valid entries of ``x`` into the running moments.

        Returns the batch's own mean and unbiased std (0.0, 0.0 for an empty batch, which leaves
        the running moments unchanged). Non-finite values are rejected with ``ValueError``: one
        NaN here would poison every later normalisation.
        """
        values = x.detach().to(torch.float64).flatten()
        if mask is not None:
            values = values[_as_bool(mask).flatten()]
        n = values.numel()
        if n == 0:
            return 0.0, 0.0
        if not torch.isfinite(values).all():
            raise ValueError("RunningMoments.update: x holds NaN or inf among its valid entries")
        batch_mean = values.mean().item()
        batch_var = values.var(unbiased=False).item() if n > 1 else 0.0
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        m2 = self.var * self.count + batch_var * n + delta * delta * self.count * n / total
        self.var = m2 / total
        self.count = total
        batch_std = math.sqrt(batch_var * n / (n - 1)) if n > 1 else 0.0
        return batch_mean, batch_std

    def state_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, float]) -> None:
        missing = {"mean", "var", "count"} - set(state)
        if missing:
            raise KeyError(f"RunningMoments.load_state_dict: missing keys {sorted(missing)}")
        self.mean = float(state["mean"])
        self.var = float(state["var"])
        self.count = float(state["count"])

    def __repr__(self) -> str:
        return f"RunningMoments(mean={self.mean:.6g}, std={self.std:.6g}, count={self.count:.6g})"
