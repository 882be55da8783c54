"""AdamW for bfloat16 (or float16) stored weights whose small updates are not lost, and the probe
behind ``actor/update_ratio`` / ``actor/params_changed_frac``.

Plain AdamW moves each weight by about ``lr`` per step; a stored bfloat16 weight keeps only 8
significant bits, so an update below half its spacing (6.1e-5 at |w| = 0.02) rounds away.
:class:`LowPrecisionAdamW` computes the AdamW step in float32 and writes it back by one of:

* ``kahan``: a compensation buffer ``c`` in the stored dtype holds what rounding dropped; the
  trained weight is ``w + c``; each step adds ``c`` to the update before rounding and keeps the new
  remainder: ``u = step + c; w' = round(w + u); c' = u - (w' - w)``. Deterministic; 2 bytes/param.
* ``stochastic_rounding``: ``w' = round_stochastic(w + step)``, rounding up with probability equal
  to the remainder's fraction of a spacing: right in expectation, but a weight moves rarely when the
  update is far below a spacing. No extra buffer.
* ``master``: a float32 master copy kept in the optimizer (DeepSpeed/OpenRLHF's bf16 + fp32
  master); the model's bf16 weight is its rounding. 4 bytes/param more.

First moments are stored in the weights' dtype (kahan, stochastic_rounding: ``beta1`` = 0.9 moves
them by 10% a step, far above bf16's 0.4% resolution), second moments in float32 (``beta2`` =
0.999 moves them by 0.1% a step, which bfloat16 would round away). Optimizer state keeps its own
dtypes through ``load_state_dict`` (torch casts every state tensor to its parameter's dtype).
"""

from __future__ import annotations

import math

import torch

VARIANTS = ("kahan", "stochastic_rounding", "master")


def stochastic_round_to_bf16(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` (float32) rounded to bfloat16 up or down at random, with probability of rounding up
    equal to the dropped low 16 bits' fraction: ``E[result] = x`` for finite ``x``."""
    bits = x.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, device=x.device, generator=generator)
    rounded = (bits + noise) & -65536  # 0xFFFF0000: keep sign, exponent and 7 mantissa bits
    out = rounded.view(torch.float32)
    return torch.where(torch.isfinite(x), out, x).to(torch.bfloat16)


class LowPrecisionAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, bias-corrected moments) for low-precision stored weights;
    ``variant`` one of :data:`VARIANTS` (module doc). Float32 parameters get plain AdamW math."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 variant: str = "kahan"):
        if variant not in VARIANTS:
            raise ValueError(f"model.bf16_update = {variant!r}: valid are {', '.join(VARIANTS)}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})
        self.variant = variant

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's, then every state tensor put back in its saved dtype (torch casts them to the
        parameter's: a float32 moment or master copy of a bfloat16 weight would be rounded)."""
        super().load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        for index, saved in state_dict["state"].items():
            p = params[index]
            for key, value in saved.items():
                if torch.is_tensor(value) and key != "step":
                    self.state[p][key] = value.to(device=p.device, copy=True)

    def _init_state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            low = p.dtype in (torch.bfloat16, torch.float16)
            state["step"] = torch.zeros((), dtype=torch.float32)
            first_dtype = p.dtype if low and self.variant != "master" else torch.float32
            state["exp_avg"] = torch.zeros_like(p, dtype=first_dtype)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
            if low and self.variant == "kahan":
                state["compensation"] = torch.zeros_like(p)
            if low and self.variant == "master":
                state["master"] = p.detach().float().clone()
        return state

    def trained_value(self, p: torch.Tensor) -> torch.Tensor:
        """``p``'s trained value in float32: ``w + c`` (kahan), the master copy, or ``w``."""
        state = self.state.get(p, {})
        if "master" in state:
            return state["master"]
        if "compensation" in state:
            return p.detach().float() + state["compensation"].float()
        return p.detach().float()

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self._init_state(p)
                state["step"] += 1
                t = float(state["step"])
                g = p.grad.float()
                m32 = state["exp_avg"].float().lerp(g, 1 - beta1)  # a new tensor: divided in place below
                state["exp_avg"].copy_(m32)
                state["exp_avg_sq"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2**t)).add_(group["eps"])
                self._apply(p, state, m32.div_(denom).mul_(-group["lr"] / (1 - beta1**t)), group)
        return loss

    def _apply(self, p: torch.Tensor, state: dict, adam: torch.Tensor, group: dict) -> None:
        """Write ``w - lr*wd*w + adam`` (float32 ``adam``) into ``p`` by the variant's rounding."""
        decay = 1 - group["lr"] * group["weight_decay"]
        if "master" in state:
            master = state["master"]
            master.mul_(decay).add_(adam)
            p.copy_(master)
            return
        w = p.float()
        if p.dtype == torch.float32:
            p.mul_(decay).add_(adam)
            return
        if "compensation" in state:
            c = state["compensation"]
            update = w.add(c.float()).mul_(decay).sub_(w).add_(adam)  # decay of the trained value w + c
            new = (w + update).to(p.dtype)
            c.copy_(update.sub_(new.float() - w))
            p.copy_(new)
        elif self.variant == "stochastic_rounding" and p.dtype == torch.bfloat16:
            p.copy_(stochastic_round_to_bf16(w.mul_(decay).add_(adam)))
        else:  # float16 without a compensation: round to nearest
            p.copy_(w.mul_(decay).add_(adam))


def trained_value(p: torch.Tensor, optimizer) -> torch.Tensor:
    """The float32 trained value of ``p`` under ``optimizer`` (its master or compensated value)."""
    if isinstance(optimizer, LowPrecisionAdamW):
        return optimizer.trained_value(p)
    return p.detach().float()


def _local(p: torch.Tensor) -> torch.Tensor:
    """This rank's shard of an FSDP2 parameter (a DTensor), else ``p``."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return p
    return p.to_local() if isinstance(p, DTensor) else p


class UpdateProbe:
    """A fixed sample of at most ``per_tensor`` entries of each trained tensor (every
    ``numel // per_tensor``-th entry, float32), read before and after the update:
    ``actor/update_ratio`` = ||dtheta|| / ||theta||, ``actor/update_rms`` = ||dtheta|| / sqrt(n) (the
    trained value's motion per weight, comparable with ``optim.lr``: AdamW moves a weight by about lr)
    and ``actor/params_changed_frac`` = the sampled entries whose trained value changed. Cost: one
    strided copy of the sample, twice a step."""

    def __init__(self, params, optimizer, per_tensor: int = 1024):
        self.params, self.optimizer, self.per_tensor = list(params), optimizer, per_tensor
        self.before = self._sample()

    def _sample(self) -> torch.Tensor:
        """The sample, float32, as one tensor (one copy per tensor, no device sync)."""
        out = []
        for p in self.params:
            flat = _local(trained_value(p, self.optimizer)).reshape(-1)
            stride = max(1, flat.numel() // self.per_tensor)
            out.append(flat[::stride][: self.per_tensor].float())
        return torch.cat(out) if out else torch.zeros(0)

    def metrics(self) -> dict[str, float]:
        """``actor/update_ratio``, ``actor/update_rms`` and ``actor/params_changed_frac`` (one device sync)."""
        if self.before.numel() == 0:
            return {"actor/update_ratio": 0.0, "actor/update_rms": 0.0, "actor/params_changed_frac": 0.0}
        d = self._sample() - self.before
        diff_sq, norm_sq, changed = torch.stack([d.square().sum(), self.before.square().sum(),
                                                 (d != 0).sum().float()]).tolist()
        return {"actor/update_ratio": math.sqrt(diff_sq) / max(math.sqrt(norm_sq), 1e-30),
                "actor/update_rms": math.sqrt(diff_sq / d.numel()),
                "actor/params_changed_frac": changed / d.numel()}
