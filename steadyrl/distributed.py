"""Data-parallel training: process group, collectives and model wrappers, no-ops in one process.

Everything the trainer does across data-parallel ranks goes through here, so a run without
``torch.distributed`` never touches it and a run with it changes nothing else:

* start and stop: :func:`init_from_env` reads what ``torchrun`` sets (``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``) and starts the process group — gloo on the CPU,
  ``cpu:gloo,cuda:nccl`` on GPUs (NCCL for the gradients, gloo for the small CPU collectives);
  :func:`device_for_rank` puts each rank on GPU ``LOCAL_RANK``; :func:`teardown` ends it;
* ``rank()``, ``world_size()``, ``is_main()``, ``barrier()``;
* ``all_reduce_sum(x)`` (the loss denominators of a whole step), ``gather_objects(x)`` (every
  rank's ``x``, in rank order: metrics, scores, RNG states), ``shard(items)`` (this rank's
  contiguous share of a global list, whole groups per rank);
* :func:`wrap_model` — ``DistributedDataParallel`` (CPU or GPU) or FSDP2 ``fully_shard`` (GPU)
  around the module whose ``forward`` is the whole computation, :func:`no_sync` for gradient
  accumulation, and the full (unsharded) state dicts that make checkpoints loadable at any
  world size (:func:`full_model_state_dict`, :func:`full_optimizer_state_dict`, ...).

steadyrl uses FSDP2 on CUDA only. Its code paths are tested on the CPU (FSDP2 shards on gloo
too); NCCL, GPU placement and memory are untested here (docs/scaling.md lists what is and is
not tested).
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

ParallelKind = str  # "ddp" | "fsdp"


# --- process group ---------------------------------------------------------------------------------

def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if is_initialized() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0")) if is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def launched_with_several_processes() -> bool:
    """True under ``torchrun`` (or any launcher that sets ``WORLD_SIZE`` > 1 and ``RANK``)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def init_from_env(use_cuda: bool, timeout_s: float = 1800.0) -> bool:
    """Start the default process group from the launcher's environment.

    Returns True when this call started it (the caller then owns :func:`teardown`), False in a
    single process or when a process group already exists (a user's own launcher script).
    """
    if is_initialized() or not launched_with_several_processes():
        return False
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "cpu:gloo,cuda:nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    return True


def teardown() -> None:
    if is_initialized():
        dist.destroy_process_group()


def device_for_rank(device: torch.device) -> torch.device:
    """``cuda`` becomes this rank's GPU, ``cuda:LOCAL_RANK``; the CPU stays the CPU."""
    if device.type == "cuda" and is_initialized():
        index = local_rank()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return device


def _collective_device() -> torch.device:
    """Where the small tensors of our own collectives live: the CPU whenever gloo is there."""
    return torch.device("cpu") if "gloo" in str(dist.get_backend()) else torch.device("cuda", torch.cuda.current_device())


# --- collectives -----------------------------------------------------------------------------------

def barrier() -> None:
    """Wait for every rank (a no-op in a single process)."""
    if is_initialized():
        dist.barrier()


def all_reduce_sum(value: float | torch.Tensor) -> float:
    """Sum of ``value`` over all ranks (the value itself in a single process)."""
    if not is_initialized():
        return float(value)
    t = torch.as_tensor(value, dtype=torch.float64).detach().to(_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


def all_reduce_max(value: float) -> float:
    """Largest ``value`` over all ranks."""
    if not is_initialized():
        return float(value)
    t = torch.tensor(float(value), dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def gather_objects(obj) -> list:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in a single process."""
    if not is_initialized():
        return [obj]
    out: list = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


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


# --- model wrappers --------------------------------------------------------------------------------

def _fsdp_module_class():
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        return None
    return FSDPModule


def is_fsdp(model) -> bool:
    cls = _fsdp_module_class()
    return cls is not None and any(isinstance(m, cls) for m in model.modules())


def is_ddp(model) -> bool:
    return isinstance(model, nn.parallel.DistributedDataParallel)


def wrap_model(module: nn.Module, kind: ParallelKind, device: torch.device, *, layers_of: nn.Module) -> nn.Module:
    """``module`` ready for data-parallel training, or ``module`` itself in a single process.

    ``module.forward`` must be the whole differentiable computation (the log-prob module, the
    critic): DDP's hooks and FSDP's all-gathers only run around a wrapped module's forward.

    * ``ddp``: ``DistributedDataParallel``; buffers are not broadcast each forward (they are
      identical: rotary tables), parameters are broadcast from rank 0 once, at wrapping.
    * ``fsdp``: FSDP2 ``fully_shard`` on every decoder layer of ``layers_of`` (the classes named
      by its ``_no_split_modules``), then on ``module`` as the root (steadyrl asks for it on
      CUDA only; tested on gloo, untested on GPUs).
    """
    if world_size() == 1:
        return module
    if kind == "ddp":
        device_ids = [device.index] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(module, device_ids=device_ids, **_no_buffer_sync())
    if kind == "fsdp":
        return _fully_shard(module, layers_of)
    raise ValueError(f"parallel kind {kind!r} is not one of ['ddp', 'fsdp']")


def _no_buffer_sync() -> dict:
    """DDP's option not to broadcast buffers before every forward (renamed in recent torch)."""
    import inspect

    params = inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters
    return {"forward_sync_buffers": False} if "forward_sync_buffers" in params else {"broadcast_buffers": False}


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a transformers model: modules whose class is listed in its
    ``_no_split_modules`` (what accelerate and the HF FSDP integration shard by)."""
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


def _fully_shard(module: nn.Module, layers_of: nn.Module) -> nn.Module:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        raise RuntimeError("trainer.parallel = 'fsdp' needs torch >= 2.6 (torch.distributed.fsdp.fully_shard)") from None
    layers = decoder_layers(layers_of)
    if not layers:
        raise RuntimeError(f"trainer.parallel = 'fsdp': found no decoder layers in {type(layers_of).__name__} "
                           "(no _no_split_modules); use trainer.parallel=ddp for this model")
    for layer in layers:
        fully_shard(layer)
    fully_shard(module)
    return module


@contextlib.contextmanager
def no_sync(model, active: bool = True):
    """Accumulate gradients locally (no all-reduce / reduce-scatter) while ``active``: DDP's
    ``no_sync``, FSDP2's ``set_requires_gradient_sync(False)``; a no-op for a plain module."""
    if not active:
        yield
    elif is_ddp(model):
        with model.no_sync():
            yield
    elif hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        yield


def grad_norm_value(norm) -> float:
    """The float of ``clip_grad_norm_``'s result (a DTensor under FSDP2: its full value)."""
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)


# --- full (unsharded) state dicts, for checkpoints loadable at any world size ----------------------

def _state_dict_options(**kwargs):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def full_model_state_dict(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """FSDP2: the full state dict on the CPU (a collective: every rank calls it; rank 0 gets the
    tensors). None for a plain or DDP model, whose own ``state_dict`` is already full."""
    if not is_fsdp(model):
        return None
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_state_dict_options(cpu_offload=True))


def load_full_model_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a full state dict into an FSDP2 model (every rank passes the same full tensors)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, dict(state), options=_state_dict_options(strict=False))  # it rewrites the dict


def _trainable_names(model: nn.Module) -> list[str]:
    """Names of the parameters an optimizer built on ``[p for p in parameters() if
    p.requires_grad]`` holds, in its order."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def optimizer_state_to_indices(state: dict, names: list[str]) -> dict:
    """An optimizer state dict keyed by parameter names (``get_optimizer_state_dict``'s format)
    in ``torch.optim``'s own format, keyed by position — the one every checkpoint uses."""
    index = {name: i for i, name in enumerate(names)}
    groups = [{**g, "params": [index[p] for p in g["params"]]} for g in state["param_groups"]]
    return {"state": {index[k]: v for k, v in state["state"].items()}, "param_groups": groups}


def optimizer_state_to_names(state: dict, names: list[str]) -> dict:
    """The inverse of :func:`optimizer_state_to_indices`."""
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {names[k]: v for k, v in state["state"].items()}, "param_groups": groups}


def full_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer state in ``torch.optim``'s position-keyed format, full (a collective under
    FSDP2: every rank calls it). Under DDP every rank holds the same full state already."""
    if not is_fsdp(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    named = get_optimizer_state_dict(model, optimizer, options=_state_dict_options(cpu_offload=True))
    if "param_groups" not in named:  # ranks other than 0 get nothing with cpu_offload
        return named
    return optimizer_state_to_indices(named, _trainable_names(model))


def load_full_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load a position-keyed full optimizer state (from any world size) into ``optimizer``."""
    if not is_fsdp(model) or not state["state"]:  # no per-parameter tensors: nothing to shard
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    named = optimizer_state_to_names(state, _trainable_names(model))
    set_optimizer_state_dict(model, optimizer, named, options=_state_dict_options())


# --- generation with FSDP2 -------------------------------------------------------------------------

class FSDPGenerator:
    """What the HF engine generates with when the policy is sharded with FSDP2 (tested on gloo).

    ``generate`` runs through the FSDP root's ``forward`` (so the root's own parameters —
    embeddings, final norm, LM head — are gathered, and FSDP's lazy initialisation happens as
    for any forward) with every sharded module told not to reshard after its forward: the
    first forward of the call (the prompt's) all-gathers each decoder layer once, and the
    following decoding steps reuse the gathered parameters, with no collective — so ranks may
    generate different numbers of tokens. Afterwards every module is resharded. The full
    parameters of the model must fit on one GPU during generation.
    """

    def __init__(self, root: nn.Module, model: nn.Module):
        self.root, self.model = root, model
        self.generation_config = getattr(model, "generation_config", None)

    def parameters(self):
        return self.model.parameters()

    def named_parameters(self, *args, **kwargs):
        return self.model.named_parameters(*args, **kwargs)

    @property
    def training(self) -> bool:
        return self.model.training

    def eval(self):
        self.model.eval()
        return self

    def train(self, mode: bool = True):
        self.model.train(mode)
        return self

    @torch.no_grad()
    def generate(self, **kwargs):
        cls = _fsdp_module_class()
        modules = [m for m in self.root.modules() if isinstance(m, cls)]
        keep = [m for m in modules if hasattr(m, "set_reshard_after_forward")]  # torch >= 2.6
        for m in keep:
            m.set_reshard_after_forward(False, recurse=False)
        try:
            return self.root(generate=kwargs)
        finally:
            for m in modules:
                m.reshard()
            for m in keep:
                m.set_reshard_after_forward(m is not self.root, recurse=False)
