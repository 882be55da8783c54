"""A tiny Llama-style causal LM built from a config (random weights, no download).

Sized for the CPU demo: two layers of width 128 train and generate fast on two cores. Dropout is
0 everywhere and the input and output embeddings are tied. The special-token ids come from the
tokenizer and are written into both the model config and its ``generation_config``, so
``model.generate`` pads and stops correctly, and the model round-trips through
``save_pretrained`` / ``AutoModelForCausalLM.from_pretrained`` of a local directory.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, PreTrainedTokenizerBase

__all__ = ["build_tiny_model"]


def _check(n_layers: int, hidden_size: int, n_heads: int) -> None:
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    if n_heads < 1 or hidden_size % n_heads or (hidden_size // n_heads) % 2:
        raise ValueError(
            f"hidden_size ({hidden_size}) must be a multiple of n_heads ({n_heads}) with an even "
            "head size (rotary embeddings)"
        )


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    *,
    n_layers: int = 2,
    hidden_size: int = 128,
    n_heads: int = 4,
    intermediate_size: int | None = None,
    max_positions: int = 64,
    seed: int = 0,
) -> torch.nn.Module:
    """A randomly initialised ``LlamaForCausalLM`` over ``tokenizer``'s vocabulary, in eval mode.

    ``intermediate_size`` defaults to ``4 * hidden_size``. The weights depend only on ``seed``
    (the global torch RNG is left as it was).
    """
    _check(n_layers, hidden_size, n_heads)
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
           "eos_token_id": tokenizer.eos_token_id}
    missing = [k for k, v in ids.items() if v is None]
    if missing:
        raise ValueError(f"tokenizer must define pad, bos and eos tokens; missing {missing}")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        max_position_embeddings=max_positions,
        attention_dropout=0.0,
        tie_word_embeddings=True,
        initializer_range=0.02,
        **ids,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.generation_config = GenerationConfig(**ids)
    return model.eval()
