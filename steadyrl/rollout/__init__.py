"""Generation engines: HF generate (default, CPU or GPU) and vLLM (GPU, optional extra)."""

from .base import Generation, eos_token_ids, response_mask_from_ids
from .hf import HFEngine

__all__ = ["Generation", "HFEngine", "eos_token_ids", "response_mask_from_ids", "build_engine"]


def build_engine(name: str, model, tokenizer, rollout_config):
    """The engine named by ``rollout.engine``."""
    if name == "hf":
        return HFEngine(model, tokenizer, batch_size=rollout_config.generation_batch_size)
    if name == "vllm":
        from .vllm import VLLMEngine  # imported lazily: vLLM is an optional GPU extra

        return VLLMEngine(model, tokenizer, rollout_config)
    raise ValueError(f"rollout.engine {name!r} is not one of ['hf', 'vllm']")
