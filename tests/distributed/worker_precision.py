"""Run by ``torchrun --nproc_per_node 2`` from test_precision_parallel.py (gloo, CPU): 2 updates at
lr 1e-6 on each rank's half of a fixed batch, DDP and FSDP2, in float32 and in the GPU default
(float32 weights under bfloat16 autocast, emulated on the CPU), and DDP with bfloat16 weights
under the Kahan-compensated update. Rank 0 writes each run's fraction of weights moved to
``OUT/result.pt``.

    torchrun --nproc_per_node 2 worker_precision.py MODEL_DIR OUT_DIR
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support_precision import LR, batch, config, moved_fraction  # noqa: E402

from steadyrl import distributed as dist  # noqa: E402
from steadyrl.assembly.setup import build_models, build_optimizer  # noqa: E402
from steadyrl.precision import precision_plan  # noqa: E402
from steadyrl.trainer.forward import PolicyLogprobs  # noqa: E402
from steadyrl.trainer.optim import trained_value  # noqa: E402
from steadyrl.trainer.update import ppo_update  # noqa: E402

CPU = torch.device("cpu")
RUNS = {"ddp/float32": ("ddp", "float32", "cpu"), "ddp/auto-gpu": ("ddp", "auto", "cuda"),
        "ddp/bfloat16-kahan": ("ddp", "bfloat16", "cpu"),
        "fsdp/float32": ("fsdp", "float32", "cpu"), "fsdp/auto-gpu": ("fsdp", "auto", "cuda")}


def _full(policy, opt, kind) -> list[torch.Tensor] | None:
    """Every trained weight in float32 (FSDP: gathered, on rank 0 only; None elsewhere)."""
    if kind == "fsdp":
        state = dist.full_model_state_dict(policy)
        return [v.float() for v in state.values()] if state else None
    return [trained_value(p, opt).clone() for p in policy.parameters()]


def _moved(model_dir: str, kind: str, dtype: str, device_type: str) -> float:
    cfg = config(dtype, "kahan")
    torch.manual_seed(0)
    policy, _, _, _ = build_models(cfg, model_dir, CPU, precision_plan(dtype, "kahan", device_type))
    wrapped = dist.wrap_model(PolicyLogprobs(policy), kind, CPU, layers_of=policy)
    opt = build_optimizer(wrapped.parameters(), cfg.optim, LR, "kahan")
    before = _full(policy, opt, kind)
    rows = 8
    mine = list(range(dist.rank() * rows // 2, (dist.rank() + 1) * rows // 2))
    for step in range(2):
        ppo_update(wrapped, opt, batch(seed=step).select(torch.tensor(mine)), cfg, kl_coef=0.0, device=CPU)
    after = _full(policy, opt, kind)
    return moved_fraction(before, after) if after is not None else float("nan")


def main(model_dir: str, out: Path) -> None:
    torch.set_num_threads(1)
    assert dist.init_from_env(use_cuda=False) and dist.world_size() == 2
    result = {name: _moved(model_dir, *args) for name, args in RUNS.items()}
    if dist.is_main():
        torch.save(result, out / "result.pt")
    dist.teardown()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
