"""What a run's weights are stored, computed, updated and sampled in (docs/precision.md).

:func:`precision_plan` resolves ``model.dtype`` and ``model.bf16_update`` for a device type into a
:class:`PrecisionPlan`, torch-free (``steadyrl config show`` prints it, the compat rules read it):

==================  ===================  =====================  ==========================================
``model.dtype``     stored (trained)     computed               updated by
==================  ===================  =====================  ==========================================
auto, CUDA (bf16)   float32              bfloat16 (autocast)    AdamW, float32 state
auto, CPU           float32              float32                AdamW, float32 state
float32             float32              float32                AdamW, float32 state
bfloat16            bfloat16             bfloat16               ``model.bf16_update`` (kahan by default)
float16 (CUDA)      float16              float16                ``model.bf16_update``
==================  ===================  =====================  ==========================================

A weight update smaller than half the spacing of the stored dtype is lost (AdamW moves a weight by
about ``lr`` a step; bfloat16's spacing at |w| = 0.02 is 1.2e-4), so trained weights are float32
by default and bfloat16 only with an update that keeps small steps (:mod:`steadyrl.trainer.optim`).

:func:`use_autocast` makes a model compute in the plan's dtype: forward hooks on the model and on
its backbone enter ``torch.autocast`` for each forward call (training, log-probs, generation) and
leave it when the call ends, also on an error. Backward passes run outside it, as autocast wants.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

BF16_SPACING_AT_0_02 = 2.0**-13
"""bfloat16's spacing for 0.0156 <= |w| < 0.03125 (a typical weight of a pretrained LM): 1.22e-4."""

LOST_UPDATE_LR = BF16_SPACING_AT_0_02 / 2
"""AdamW moves a weight by about ``lr`` per step: below half a spacing at |w| = 0.02 (6.1e-5), plain
AdamW on bfloat16 weights loses the update of most weights (refused, config/compat.py)."""

NORM_WEIGHT_LOST_LR = 2.0**-8 / 2
"""Half of bfloat16's spacing at |w| = 1 (norm weights): below 3.9e-3 plain AdamW loses their
updates (a pre-flight warning)."""

Bf16Update = Literal["kahan", "stochastic_rounding", "master", "plain"]
BF16_UPDATES = ("kahan", "stochastic_rounding", "master", "plain")


@dataclass(frozen=True)
class PrecisionPlan:
    """Where each copy of the weights lives, as dtype names."""

    stored: str  # the trained weights (what the optimizer writes, what checkpoints hold)
    computed: str  # forward / backward matmuls (autocast when it differs from ``stored``)
    update: str  # "adamw" or a model.bf16_update variant for low-precision stored weights
    sampled: str  # the engine's weights (rollout.dtype, else the trainer's, under its autocast)

    @property
    def autocast(self) -> bool:
        return self.computed != self.stored

    @property
    def low_precision_stored(self) -> bool:
        return self.stored in ("bfloat16", "float16")

    def describe(self) -> str:
        """One line: what is stored, computed, updated and sampled in."""
        rounding = ("AdamW with stochastic rounding into bfloat16" if self.stored == "bfloat16" else
                    f"AdamW rounding to nearest into {self.stored} (stochastic rounding is for bfloat16 only: "
                    "updates below half the spacing are lost, as with plain)")
        update = {"adamw": "AdamW (float32 state)",
                  "kahan": f"Kahan-compensated AdamW ({self.stored} compensation buffer, float32 second moment)",
                  "stochastic_rounding": rounding,
                  "master": "AdamW on a float32 master copy kept by the optimizer",
                  "plain": "plain AdamW (updates below half the stored dtype's spacing are lost)"}[self.update]
        how = " (autocast)" if self.autocast else ""
        return (f"stored {self.stored}, computed {self.computed}{how}, updated by {update}, "
                f"sampled {self.sampled}")


def precision_plan(dtype: str, bf16_update: str, device_type: str, *, rollout_dtype: str | None = None,
                   bf16_supported: bool = True) -> PrecisionPlan:
    """The plan of ``model.dtype = dtype`` with ``model.bf16_update`` on ``device_type`` ("cuda",
    "cpu", ...). ``bf16_supported``: the CUDA device computes in bfloat16 (Ampere and later)."""
    if dtype == "auto":
        computed = "bfloat16" if device_type == "cuda" and bf16_supported else "float32"
        stored, update = "float32", "adamw"
    else:
        stored = computed = dtype
        update = "adamw" if dtype == "float32" else bf16_update
    sampled = rollout_dtype or (computed if computed == stored else f"{stored} under {computed} autocast")
    return PrecisionPlan(stored=stored, computed=computed, update=update, sampled=sampled)


def describe_settings(rollout_dtype: str | None = None) -> list[str]:
    """Every ``model.dtype`` setting's plan on CUDA and the CPU, one line each (``config show``)."""
    lines = []
    for dtype in ("auto", "float32", "bfloat16", "float16"):
        for device in ("cuda", "cpu"):
            if dtype == "float16" and device == "cpu":
                lines.append("model.dtype=float16 on cpu: refused (sampling overflows to NaN)")
                continue
            plan = precision_plan(dtype, "kahan", device, rollout_dtype=rollout_dtype)
            lines.append(f"model.dtype={dtype} on {device}: {plan.describe()}")
    return lines


def precision_warnings(model_config, optim_config, uses_critic: bool = False) -> list[str]:
    """Warnings before training (torch-free): plain AdamW on bfloat16/float16 weights at an lr that
    rounds away the updates of large weights (norm weights near 1 below lr 3.9e-3), and stochastic
    rounding at an lr far below a spacing (each weight moves rarely, right only on average). Plain
    AdamW below :data:`LOST_UPDATE_LR` is refused by the config rules, not warned about."""
    if model_config.dtype not in ("bfloat16", "float16"):
        return []
    lrs = [("optim.lr", optim_config.lr)] + ([("optim.critic_lr", optim_config.critic_lr)] if uses_critic else [])
    out = []
    for key, lr in lrs:
        if model_config.bf16_update == "plain" and lr < NORM_WEIGHT_LOST_LR:
            out.append(f"model.dtype = {model_config.dtype!r} with model.bf16_update = 'plain' and {key} = {lr:g}: "
                       f"plain AdamW loses the updates of weights above |w| = {lr * 2**9:.2g} (the norm weights, "
                       "near 1, never move below lr 3.9e-3); model.dtype=auto or model.bf16_update=kahan keeps them")
        elif model_config.bf16_update == "stochastic_rounding" and lr < LOST_UPDATE_LR:
            out.append(f"model.bf16_update = 'stochastic_rounding' with {key} = {lr:g}: each step moves a weight "
                       "with a small probability only (right on average, noisy); model.bf16_update=kahan moves "
                       "every weight (docs/precision.md)")
    return out


class _AutocastHooks:
    """A forward pre-hook that enters ``torch.autocast`` and a forward hook that leaves it (one
    stack per thread: the asynchronous worker's thread and the trainer's each have their own)."""

    def __init__(self, device_type: str, dtype_name: str):
        self.device_type, self.dtype_name = device_type, dtype_name
        self._local = threading.local()

    def _stack(self) -> list:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack

    def enter(self, module, args):
        import torch

        ctx = torch.autocast(self.device_type, dtype=getattr(torch, self.dtype_name))
        ctx.__enter__()
        self._stack().append(ctx)

    def leave(self, module, args, output):
        stack = self._stack()
        if stack:
            stack.pop().__exit__(None, None, None)

    def __deepcopy__(self, memo):  # copies of the model (reference, engine copy) get their own stacks
        return _AutocastHooks(self.device_type, self.dtype_name)


def use_autocast(model, plan: PrecisionPlan, device_type: str) -> None:
    """Make every forward of ``model`` (and of its backbone, which the fused log-prob path calls
    directly) run under ``torch.autocast(device_type, plan.computed)``. Nothing when the plan
    computes in the stored dtype."""
    if not plan.autocast:
        return
    prefix = getattr(model, "base_model_prefix", None)
    backbone = getattr(model, prefix, None) if prefix else None
    for module in (model, backbone) if backbone is not None and backbone is not model else (model,):
        hooks = _AutocastHooks(device_type, plan.computed)
        module.register_forward_pre_hook(hooks.enter)
        module.register_forward_hook(hooks.leave, always_call=True)


def computed_dtype_of(model) -> str | None:
    """The dtype name :func:`use_autocast` made ``model`` compute in, or None (it computes in its
    weights' dtype). vLLM samples in it: float32 weights of ``model.dtype: auto`` on a GPU are
    sampled in bfloat16, as they are computed."""
    for hook in getattr(model, "_forward_pre_hooks", {}).values():
        owner = getattr(hook, "__self__", None)
        if isinstance(owner, _AutocastHooks):
            return owner.dtype_name
    return None

