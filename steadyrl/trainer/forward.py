"""Forward passes of the training step: response log-probs (and entropy) and critic values.

Two log-prob paths, chosen by ``trainer.logprob_impl``:

* ``fused`` (default): the backbone's last hidden states at the response positions go through
  :func:`~steadyrl.functional.logprobs_from_hidden` with the LM-head weight, so ``[B, R, V]``
  logits never exist, in the forward or the backward pass.
* ``naive``: the model's logits for the response positions only (``logits_to_keep``), then the
  chunked :func:`~steadyrl.functional.logprobs_and_entropy_from_logits`.

Models whose logits are not a plain linear map of the last hidden state fall back to ``naive``.
"""

from __future__ import annotations

import torch

from ..functional import logprobs_and_entropy_from_logits, logprobs_from_hidden, logprobs_from_logits
from ..models import lm_backbone_and_head
from .batch import TrainBatch


def response_logprobs(model, batch: TrainBatch, *, temperature: float, impl: str = "fused",
                      chunk_size: int | None = None, with_entropy: bool = False):
    """``(logprobs [B, R], entropy [B, R] or None)`` of the response tokens, float32."""
    p, r = batch.prompt_len, batch.response_len
    labels = batch.response_ids
    parts = lm_backbone_and_head(model) if impl == "fused" else None
    if parts is not None:
        backbone, head = parts
        out = backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       position_ids=batch.position_ids, use_cache=False)
        hidden = out.last_hidden_state[:, p - 1 : p - 1 + r]
        result = logprobs_from_hidden(hidden, head.weight, labels, temperature,
                                      return_entropy=with_entropy, chunk_size=chunk_size, bias=head.bias)
        return result if with_entropy else (result, None)
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                position_ids=batch.position_ids, use_cache=False, logits_to_keep=r + 1)
    logits = out.logits[:, :-1]
    if with_entropy:
        return logprobs_and_entropy_from_logits(logits, labels, temperature, chunk_size)
    return logprobs_from_logits(logits, labels, temperature, chunk_size), None


def critic_values(critic, batch: TrainBatch) -> torch.Tensor:
    """``V [B, R]``: the critic's value of the state before each response token."""
    p, r = batch.prompt_len, batch.response_len
    values = critic(batch.input_ids, batch.attention_mask, batch.position_ids)
    return values[:, p - 1 : p - 1 + r]
