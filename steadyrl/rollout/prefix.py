"""Prefix sharing: compute each prompt once per group instead of once per sample.

A GRPO batch holds ``n`` samples of every prompt, so a plain implementation runs each prompt
``n`` times in generation and ``n`` times again in every log-prob pass. Here:

* generation (:func:`prefill_once`) runs every prompt but its last token once, repeats the KV
  cache ``n`` times and lets ``generate`` continue from it;
* a log-prob pass (:func:`hidden_with_shared_prompts`) runs each *distinct* prompt once, gathers
  its KV cache to the rows that share it (``index_select``, whose backward sums the rows'
  gradients into the prompt's computation) and runs only the responses against it.

Both give the same numbers as the plain path (to float rounding) and are used only where the
cache is plain: a transformers model whose ``DynamicCache`` has no sliding-window or
linear-attention layer, without activation checkpointing (which drops the cache in training).
``trainer.share_prompt_prefix: false`` turns the whole thing off.

The cache is passed as ``cache=`` where the model's ``forward`` takes it (transformers 5.x, which
deprecates ``past_key_values``) and as ``past_key_values=`` otherwise (older transformers, and
remote-code models that kept the old name).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

_CHECKED = "_steadyrl_prefix_cache_ok"


def supports_prefix_cache(model: nn.Module) -> bool:
    """Whether ``model`` (a transformers model, possibly PEFT-wrapped) can share a prompt's cache."""
    from transformers import PreTrainedModel

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not isinstance(base, PreTrainedModel):
        return False
    if any(getattr(m, "gradient_checkpointing", False) for m in base.modules()):
        return False
    cached = base.__dict__.get(_CHECKED)
    if cached is None:
        cached = _plain_dynamic_cache(base)
        base.__dict__[_CHECKED] = cached
    return cached


def _plain_dynamic_cache(model) -> bool:
    from transformers.cache_utils import DynamicCache

    supports = getattr(type(model), "_supports_default_dynamic_cache", None)
    if supports is not None and not supports():
        return False
    try:
        cache = DynamicCache(config=model.config)
    except Exception:  # a config DynamicCache cannot read: not a plain decoder
        return False
    return not any(cache.is_sliding) and not any(cache.is_linear)


def cache_kwarg(model: nn.Module) -> str:
    """The keyword ``model``'s forward takes its KV cache by: ``cache`` or ``past_key_values``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        params = inspect.signature(type(base).forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _positions(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def prefill_once(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int) -> dict | None:
    """``generate`` keyword arguments that continue from a cache of the prompts computed once and
    repeated ``n`` times (rows stay in group order), or ``None`` when sharing does not apply."""
    from transformers.cache_utils import DynamicCache

    if n < 2 or input_ids.shape[1] < 2 or not supports_prefix_cache(model):
        return None
    cache = DynamicCache(config=model.config)
    name = cache_kwarg(model)
    model(input_ids=input_ids[:, :-1], attention_mask=attention_mask[:, :-1],
          position_ids=_positions(attention_mask)[:, :-1], use_cache=True, logits_to_keep=1, **{name: cache})
    cache.batch_repeat_interleave(n)
    return {"input_ids": input_ids.repeat_interleave(n, 0),
            "attention_mask": attention_mask.repeat_interleave(n, 0), name: cache}


def hidden_with_shared_prompts(model, backbone, input_ids, attention_mask, position_ids,
                               prompt_len: int, response_len: int) -> torch.Tensor | None:
    """Last hidden states at positions ``prompt_len - 1 ... prompt_len + response_len - 2`` (the
    ones that predict the response tokens), each distinct prompt run once; ``None`` when no two
    rows share a prompt or sharing does not apply."""
    from transformers.cache_utils import DynamicCache

    p, r = prompt_len, response_len
    if p < 1 or input_ids.shape[0] < 2 or not supports_prefix_cache(model):
        return None
    key = torch.cat([input_ids[:, :p], attention_mask[:, :p]], 1)
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)
    if distinct.shape[0] == input_ids.shape[0]:
        return None
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)
    first = torch.full((distinct.shape[0],), input_ids.shape[0], dtype=torch.long, device=input_ids.device)
    first = first.scatter_reduce(0, inverse, rows, "amin")  # one row of each distinct prompt
    cache = DynamicCache(config=getattr(model, "config", None) or backbone.config)
    name = cache_kwarg(backbone)
    prompt_out = backbone(input_ids=input_ids[first, :p], attention_mask=attention_mask[first, :p],
                          position_ids=position_ids[first, :p], use_cache=True, **{name: cache})
    last = prompt_out.last_hidden_state[:, -1:].index_select(0, inverse)
    if r == 1:
        return last
    cache.reorder_cache(inverse)
    response_out = backbone(input_ids=input_ids[:, p : p + r - 1], attention_mask=attention_mask[:, : p + r - 1],
                            position_ids=position_ids[:, p : p + r - 1], use_cache=True, **{name: cache})
    return torch.cat([last, response_out.last_hidden_state], 1)
