"""The few collective operations the trainer needs, as no-ops in a single process.

Everything the trainer does across data-parallel ranks goes through here, so a run without
``torch.distributed`` never touches it and a run with it changes nothing else:

* ``rank()``, ``world_size()``, ``is_main()``;
* ``all_reduce_sum(x)``: the loss denominators (valid tokens, sequences) of a whole step;
* ``shard(items)``: this rank's contiguous share of a global list (whole groups per rank).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    """Wait for every rank (a no-op in a single process)."""
    if is_initialized():
        dist.barrier()


def all_reduce_sum(value: float | torch.Tensor) -> float:
    """Sum of ``value`` over all ranks (the value itself in a single process)."""
    if not is_initialized():
        return float(value)
    t = torch.as_tensor(value, dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


def shard(items: list, unit: int = 1) -> list:
    """This rank's contiguous share of ``items``, cut in blocks of ``unit`` (e.g. one prompt)."""
    n = world_size()
    if n == 1:
        return items
    blocks = len(items) // unit
    if blocks % n:
        raise ValueError(f"{blocks} blocks of {unit} cannot be split evenly over {n} ranks")
    per = blocks // n * unit
    return items[rank() * per : (rank() + 1) * per]
