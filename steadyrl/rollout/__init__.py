"""Generation engines: HF generate (default, CPU or GPU) and vLLM (GPU, optional extra)."""

import torch

from .base import Generation, eos_token_ids, response_mask_from_ids
from .hf import HFEngine

__all__ = ["DTYPES", "Generation", "HFEngine", "eos_token_ids", "response_mask_from_ids", "build_engine",
           "check_engine_available", "check_rollout_dtype"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""``rollout.dtype`` -> torch dtype."""


def check_rollout_dtype(name: str | None, device) -> None:
    """Fail before any model is loaded when ``rollout.dtype`` cannot sample on ``device``."""
    if name == "float16" and device.type == "cpu":
        from ..errors import ConfigError

        raise ConfigError("rollout.dtype = 'float16' is not supported on the CPU (sampling overflows to NaN); "
                          "valid here: float32, bfloat16 or null (the trainer's model.dtype)")


def check_engine_available(name: str) -> None:
    """Fail before any model is loaded when ``rollout.engine`` cannot run here."""
    if name != "vllm":
        return
    import importlib.util

    import torch

    from ..errors import ConfigError

    if importlib.util.find_spec("vllm") is None:
        raise ConfigError("rollout.engine = 'vllm' needs the vllm extra (pip install 'steadyrl[vllm]') "
                          "and a CUDA GPU; use rollout.engine=hf on this machine")
    if not torch.cuda.is_available():
        raise ConfigError("rollout.engine = 'vllm' needs a CUDA GPU and none is available; use rollout.engine=hf")


def build_engine(name: str, model, tokenizer, rollout_config, *, seed: int = 0, max_model_len: int | None = None,
                 share_prefix: bool = True):
    """The engine named by ``rollout.engine``. ``seed`` (one per data-parallel rank) and
    ``max_model_len`` (longest prompt + response) are the vLLM engine's; the HF engine samples
    from torch's global RNG."""
    if name == "hf":
        dtype = DTYPES[rollout_config.dtype] if getattr(rollout_config, "dtype", None) else None
        return HFEngine(model, tokenizer, batch_size=rollout_config.generation_batch_size, share_prefix=share_prefix,
                        dtype=dtype, cache=getattr(rollout_config, "hf_cache", "dynamic"))
    if name == "vllm":
        from .vllm import VLLMEngine  # imported lazily: vLLM is an optional GPU extra

        return VLLMEngine(model, tokenizer, rollout_config, seed=seed, max_model_len=max_model_len)
    raise ValueError(f"rollout.engine {name!r} is not one of ['hf', 'vllm']")
