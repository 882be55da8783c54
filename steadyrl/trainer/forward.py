"""Forward passes of the training step: response log-probs (and entropy) and critic values.

Three log-prob paths, chosen by ``trainer.logprob_impl``:

* ``fused`` (default): the backbone's last hidden states at the response positions go through
  :func:`~steadyrl.functional.logprobs_from_hidden` with the LM-head weight, so ``[B, R, V]``
  logits never exist, in the forward or the backward pass.
* ``chunked_grad``: the same hidden states through
  :func:`~steadyrl.functional.logprobs_from_hidden_rows`: whole-vocabulary-row token chunks, one
  recompute in the backward pass (none with a frozen LM head); meant for accelerators.
* ``naive``: the model's logits for the response positions only (``logits_to_keep``), then the
  chunked :func:`~steadyrl.functional.logprobs_and_entropy_from_logits`.

Models whose logits are not a plain linear map of the last hidden state fall back to ``naive``.
The fused path computes each distinct prompt of the batch once and reuses it for the responses
that share it (:mod:`steadyrl.rollout.prefix`; ``trainer.share_prompt_prefix``). With
``trainer.padding_free`` either path runs the micro-batch as one packed row without padding
instead (:func:`~steadyrl.trainer.packing.pack_rows`; no prefix sharing then).

Both paths run inside one module's ``forward``, :class:`PolicyLogprobs`: the fused path calls
the backbone and reads the LM-head weight directly, which would bypass the ``forward`` of a
DDP or FSDP wrapper around the transformers model (no gradient all-reduce hooks prepared, no
parameter all-gather). Wrapping :class:`PolicyLogprobs` instead puts the whole computation,
either path, behind the wrapper (see :func:`steadyrl.distributed.wrap_model`).

Images (a vision-language model): a micro-batch whose rows carry image inputs runs one plain
forward over prompt + response with the rows' collated image inputs and the token-aligned inputs
recomputed from the ids (:func:`steadyrl.vlm_inputs.model_image_kwargs`), and with no position
ids for a model that computes its own (Qwen-VL's multimodal RoPE). Prefix sharing and
``trainer.padding_free`` are not used for such a micro-batch (text-only micro-batches still use
them): a shared prompt cache would need the image features and the multimodal positions of the
prompt carried to the responses, and a packed row would need the images' positions rebuilt per
packed sequence; both would give other numbers than the plain forward, so neither is attempted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..functional import (logprobs_and_entropy_from_logits, logprobs_from_hidden, logprobs_from_hidden_rows,
                          logprobs_from_logits)
from ..models import lm_backbone_and_head
from ..rollout.prefix import hidden_with_shared_prompts
from ..vlm_inputs import collate_image_inputs, model_image_kwargs
from .batch import TrainBatch
from .packing import pack_rows


HIDDEN_IMPLS = {"fused": logprobs_from_hidden, "chunked_grad": logprobs_from_hidden_rows}
"""The ``trainer.logprob_impl`` values that read the last hidden states and the LM-head weight."""


@dataclass(frozen=True)
class LogprobSettings:
    """How :class:`PolicyLogprobs` computes the response log-probs, the same for every micro-batch of a
    call: ``log p(x_t) = log_softmax(logits_t / temperature)[x_t]`` by path ``impl``
    (:data:`HIDDEN_IMPLS` or ``naive``, module docstring) in token chunks of ``chunk_size`` (None: the
    function's default), the entropy too (``with_entropy``), each distinct prompt computed once
    (``share_prefix``) or the micro-batch packed into one row without padding (``padding_free``)."""

    temperature: float = 1.0
    impl: str = "fused"
    chunk_size: int | None = None
    with_entropy: bool = False
    share_prefix: bool = True
    padding_free: bool = False


class PolicyLogprobs(nn.Module):
    """``forward(...) -> (logprobs [B, R], entropy [B, R] or None)``, float32, for a causal LM.

    ``forward(generate=kwargs)`` runs ``model.generate(**kwargs)`` instead: the one entry point
    an FSDP root sees, so generation with a sharded model gathers the root's parameters too.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, response_ids=None, *,
                how: LogprobSettings = LogprobSettings(), generate: dict | None = None,
                image_inputs: dict | None = None):
        """``how``: the path and its settings; ``image_inputs``: the micro-batch's collated image inputs
        (a VLM's; module doc)."""
        if generate is not None:
            return self.model.generate(**generate)
        impl, temperature, chunk_size, with_entropy = how.impl, how.temperature, how.chunk_size, how.with_entropy
        share_prefix, padding_free = how.share_prefix, how.padding_free
        p, r = input_ids.shape[1] - response_ids.shape[1], response_ids.shape[1]
        parts = lm_backbone_and_head(self.model) if impl in HIDDEN_IMPLS else None
        images = None
        if image_inputs is not None:  # one plain forward with the images: no sharing, no packing (module doc)
            share_prefix = padding_free = False
            dtype = next(self.model.parameters()).dtype
            images = model_image_kwargs(self.model.config, input_ids, image_inputs, position_ids, dtype)
            position_ids = images.pop("position_ids")
        images = images or {}
        packed = pack_rows(input_ids, attention_mask, position_ids, p, r) if padding_free else None
        if parts is not None:
            backbone, head = parts
            hidden = None
            if packed is not None:  # one row, no padding; the states before each response token gathered
                ids, positions, index = packed
                out = backbone(input_ids=ids, attention_mask=None, position_ids=positions, use_cache=False)
                hidden = out.last_hidden_state[0, index]
            elif share_prefix:  # each distinct prompt once (GRPO groups): same numbers, less work
                hidden = hidden_with_shared_prompts(self.model, backbone, input_ids, attention_mask,
                                                    position_ids, p, r)
            if hidden is None:
                out = backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               use_cache=False, **images)
                hidden = out.last_hidden_state[:, p - 1 : p - 1 + r]
            result = HIDDEN_IMPLS[impl](hidden, head.weight, response_ids, temperature,
                                          return_entropy=with_entropy, chunk_size=chunk_size, bias=head.bias)
            logp, entropy = result if with_entropy else (result, None)
        else:
            if packed is not None:
                ids, positions, index = packed
                logits = self.model(input_ids=ids, attention_mask=None, position_ids=positions,
                                    use_cache=False).logits[0, index]
            else:
                out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                 use_cache=False, logits_to_keep=r + 1, **images)
                logits = out.logits[:, :-1]
            if with_entropy:
                logp, entropy = logprobs_and_entropy_from_logits(logits, response_ids, temperature, chunk_size)
            else:
                logp, entropy = logprobs_from_logits(logits, response_ids, temperature, chunk_size), None
        return _not_a_view(logp), _not_a_view(entropy)


def _not_a_view(x: torch.Tensor | None) -> torch.Tensor | None:
    """FSDP hooks the outputs of a module's forward for its backward; an in-place op on a view
    would lose that hook, so outputs are returned as tensors of their own ([B, R]: cheap)."""
    return x.clone() if x is not None and x._base is not None else x


def as_logprob_module(model: nn.Module) -> nn.Module:
    """``model`` if it already is a :class:`PolicyLogprobs` (possibly inside a DDP wrapper or
    sharded with FSDP), else a :class:`PolicyLogprobs` around the transformers model."""
    inner = getattr(model, "module", model) if isinstance(model, nn.parallel.DistributedDataParallel) else model
    return model if isinstance(inner, PolicyLogprobs) else PolicyLogprobs(model)


def response_logprobs(model, batch: TrainBatch, *, temperature: float, impl: str = "fused",
                      chunk_size: int | None = None, with_entropy: bool = False, share_prefix: bool = True,
                      padding_free: bool = False):
    """``(logprobs [B, R], entropy [B, R] or None)`` of the response tokens, float32.

    ``model`` is a transformers causal LM or a (wrapped) :class:`PolicyLogprobs`.
    """
    module = as_logprob_module(model)
    images = collate_image_inputs(batch.image_inputs)  # the rows' images, in row order (None: text rows)
    extra = {} if images is None else {"image_inputs": images}  # a text batch calls the module as before
    how = LogprobSettings(temperature, impl, chunk_size, with_entropy, share_prefix, padding_free)
    return module(batch.input_ids, batch.attention_mask, batch.position_ids, batch.response_ids, how=how, **extra)


def critic_values(critic, batch: TrainBatch) -> torch.Tensor:
    """``V [B, R]``: the critic's value of the state before each response token."""
    p, r = batch.prompt_len, batch.response_len
    values = critic(batch.input_ids, batch.attention_mask, batch.position_ids)
    return values[:, p - 1 : p - 1 + r]
