"""KL estimators between the policy and the reference, and the KL coefficient controllers.

Per token, with ``d = clamp(logprobs - ref_logprobs, -40, 40)`` (seed 002) computed in float32:

====== ====================== =========================================================
name   value                  note
====== ====================== =========================================================
k1     ``d``                  unbiased, high variance, can be negative
k2     ``d**2 / 2``           low variance, biased (alias ``mse``)
k3     ``exp(-d) - 1 + d``    unbiased, non-negative, then clamped to [-10, 10] (seed 000);
                              alias ``low_var_kl``
abs    ``|d|``
====== ====================== =========================================================

Clamping ``d`` *before* ``exp`` is what keeps the gradient finite: ``exp(40)`` is ~2.4e17, finite
in float32, so the clamp on the k3 value that follows has a finite derivative to zero out. (The
anchor defect was the other order: clamp after an ``exp`` that had already overflowed, giving
``inf * 0 = NaN`` in the backward pass.)
"""

from __future__ import annotations

from typing import Callable

import torch

from .constants import K3_VALUE_CLAMP, KL_CTL_PROPORTIONAL_CLIP, LOGPROB_DIFF_CLAMP

__all__ = [
    "KL_ESTIMATORS",
    "register_kl_estimator",
    "kl_penalty",
    "FixedKLController",
    "AdaptiveKLController",
]

KL_ESTIMATORS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}
"""Estimator name -> function of the clamped float32 difference ``d``."""


def register_kl_estimator(*names: str):
    """Decorator: register a function of ``d`` under one or more names."""

    def wrap(fn):
        for name in names:
            if name in KL_ESTIMATORS:
                raise ValueError(f"KL estimator {name!r} is already registered")
            KL_ESTIMATORS[name] = fn
        return fn

    return wrap


@register_kl_estimator("k1", "kl")
def _k1(d: torch.Tensor) -> torch.Tensor:
    return d


@register_kl_estimator("k2", "mse")
def _k2(d: torch.Tensor) -> torch.Tensor:
    return 0.5 * d.square()


@register_kl_estimator("k3", "low_var_kl")
def _k3(d: torch.Tensor) -> torch.Tensor:
    # expm1, not exp(-d) - 1: near d = 0 the latter cancels to the rounding of exp (float32:
    # -1.7e-8 for d = 1e-4, whose k3 is 5e-9); expm1(-d) >= -d holds in floating point, so k3 >= 0
    return (torch.expm1(-d) + d).clamp(-K3_VALUE_CLAMP, K3_VALUE_CLAMP)


@register_kl_estimator("abs")
def _abs(d: torch.Tensor) -> torch.Tensor:
    return d.abs()


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-token KL estimate of ``KL(policy || reference)``, float32 (float64 for float64 input).

    ``d = clamp(logprobs - ref_logprobs, -40, 40)``; then ``k1 = d``, ``k2 = d^2/2``,
    ``k3 = clamp(exp(-d) - 1 + d, -10, 10)``, ``abs = |d|``. No input makes the value or its
    gradient inf or NaN, provided the inputs themselves are finite.
    """
    try:
        fn = KL_ESTIMATORS[estimator]
    except KeyError:
        raise ValueError(
            f"kl estimator {estimator!r} is not one of {sorted(KL_ESTIMATORS)}"
        ) from None
    dtype = torch.float64 if logprobs.dtype == torch.float64 else torch.float32
    d = (logprobs.to(dtype) - ref_logprobs.to(dtype)).clamp(-LOGPROB_DIFF_CLAMP, LOGPROB_DIFF_CLAMP)
    return fn(d)


class FixedKLController:
    """A constant KL coefficient ``beta``; ``update`` is a no-op kept for a uniform interface."""

    def __init__(self, kl_coef: float) -> None:
        if kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
        self.value = float(kl_coef)
        self.last_step: int | None = None

    def update(self, current_kl: float, n_steps: int, step: int | None = None) -> float:
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value, "last_step": self.last_step}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
        self.last_step = state.get("last_step")


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al., 2019) steering the observed KL towards ``target``.

    ``error = clip(current_kl / target - 1, -0.2, 0.2)``;
    ``beta <- beta * (1 + error * n_steps / horizon)``.

    ``n_steps`` is the number of samples (or steps) the observed KL covers. Call :meth:`update`
    exactly once per training step: pass ``step`` and a second call for the same step raises
    ``RuntimeError`` (an anchor defect updated the coefficient once per micro-batch).
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int) -> None:
        if init_kl_coef < 0:
            raise ValueError(f"init_kl_coef must be >= 0, got {init_kl_coef}")
        if not target > 0:
            raise ValueError(f"target must be > 0, got {target}")
        if not horizon > 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = int(horizon)
        self.last_step: int | None = None

    def update(self, current_kl: float, n_steps: int, step: int | None = None) -> float:
        if step is not None:
            if self.last_step is not None and step <= self.last_step:
                raise RuntimeError(
                    f"AdaptiveKLController.update called twice for step {step} "
                    f"(last update at step {self.last_step}); update once per training step"
                )
            self.last_step = step
        current_kl = float(current_kl)
        if current_kl != current_kl:  # NaN: keep beta rather than poison it
            return self.value
        error = min(max(current_kl / self.target - 1.0, -KL_CTL_PROPORTIONAL_CLIP), KL_CTL_PROPORTIONAL_CLIP)
        self.value *= 1.0 + error * n_steps / self.horizon
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value, "target": self.target, "horizon": self.horizon, "last_step": self.last_step}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
        self.target = float(state["target"])
        self.horizon = int(state["horizon"])
        self.last_step = state.get("last_step")
