"""``trainer.logprob_impl: chunked_grad`` through the training forward pass: the same log-probs,
entropies and parameter gradients as the ``fused`` path on a real (tiny) model, in every layout."""

import pytest
import torch

from steadyrl.models import load_policy, load_tokenizer
from steadyrl.trainer.forward import response_logprobs

from .test_models import CPU, _batch


def _values_and_grads(policy, batch, impl, **layout):
    policy.zero_grad(set_to_none=True)
    logp, ent = response_logprobs(policy, batch, temperature=0.7, impl=impl, chunk_size=3, with_entropy=True,
                                  **layout)
    mask = batch.response_mask.bool()
    (logp[mask].sum() * 0.3 - ent[mask].sum()).backward()
    return logp[mask].detach(), ent[mask].detach(), {n: p.grad.clone() for n, p in policy.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("layout", [{}, {"share_prefix": False}, {"padding_free": True}])
def test_chunked_grad_equals_fused_in_values_and_parameter_gradients(tiny_model_dir, layout):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    batch = _batch(tokenizer)
    fused = _values_and_grads(policy, batch, "fused", **layout)
    rows = _values_and_grads(policy, batch, "chunked_grad", **layout)
    torch.testing.assert_close(rows[0], fused[0])
    torch.testing.assert_close(rows[1], fused[1])
    assert rows[2].keys() == fused[2].keys()
    for name, grad in fused[2].items():
        torch.testing.assert_close(rows[2][name], grad, msg=lambda m, n=name: f"{n}: {m}")


def test_chunked_grad_with_a_frozen_head_still_trains_the_body(tiny_model_dir):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    policy.get_output_embeddings().weight.requires_grad_(False)
    batch = _batch(tokenizer)
    fused = _values_and_grads(policy, batch, "fused")
    rows = _values_and_grads(policy, batch, "chunked_grad")
    assert fused[2] and rows[2].keys() == fused[2].keys()
    for name, grad in fused[2].items():
        torch.testing.assert_close(rows[2][name], grad, msg=lambda m, n=name: f"{n}: {m}")
