"""Prefix sharing computes each prompt once per group and gives the same numbers as the plain
path: log-probs, entropies and gradients, for grouped, shuffled and all-distinct batches; and
generation samples from the same distribution."""

import pytest
import torch

from steadyrl.models import load_policy, load_tokenizer
from steadyrl.rollout import HFEngine
from steadyrl.rollout.prefix import cache_kwarg, hidden_with_shared_prompts, prefill_once, supports_prefix_cache
from steadyrl.trainer.batch import batch_from_generation
from steadyrl.trainer.forward import response_logprobs

CPU = torch.device("cpu")
PROMPTS = ["abc=", "hgfed=", "ab=", "cdcd="]


def _generation(tiny_model_dir, n=3, seed=0):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    torch.manual_seed(seed)
    gen = HFEngine(model, tokenizer, share_prefix=False).generate(
        [tokenizer(p)["input_ids"] for p in PROMPTS], n, max_new_tokens=6)
    return model, tokenizer, batch_from_generation(gen)


def _logprobs_and_grads(model, batch, share):
    model.zero_grad(set_to_none=True)
    logp, ent = response_logprobs(model, batch, temperature=0.8, with_entropy=True, share_prefix=share)
    mask = batch.response_mask.bool()
    ((logp * mask).sum() + 0.3 * (ent * mask).sum()).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), ent.detach(), grads


@pytest.mark.parametrize("order", ["grouped", "shuffled", "distinct"])
def test_shared_prompt_path_equals_the_plain_path(tiny_model_dir, order):
    model, _, batch = _generation(tiny_model_dir)
    if order == "shuffled":
        batch = batch.select(torch.randperm(len(batch), generator=torch.Generator().manual_seed(1)))
    elif order == "distinct":
        batch = batch.select(torch.arange(0, len(batch), 3))  # one sample per prompt: nothing to share
    hidden = hidden_with_shared_prompts(model, model.model, batch.input_ids, batch.attention_mask,
                                        batch.position_ids, batch.prompt_len, batch.response_len)
    assert (hidden is None) == (order == "distinct")
    plain = _logprobs_and_grads(model, batch, share=False)
    shared = _logprobs_and_grads(model, batch, share=True)
    mask = batch.response_mask.bool()
    # the model computes its norms in float32 whatever the dtype: float32-level agreement
    torch.testing.assert_close(shared[0][mask], plain[0][mask], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(shared[1][mask], plain[1][mask], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(shared[2], plain[2], rtol=1e-5, atol=1e-6)


def test_shared_prefill_generation_matches_plain_generation_token_for_token(tiny_model_dir):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    outs = []
    for share in (False, True):  # the same draws from (to rounding) the same distributions
        torch.manual_seed(3)
        outs.append(HFEngine(model, tokenizer, share_prefix=share).generate(ids, 4, max_new_tokens=6))
    assert torch.equal(outs[0].response_ids, outs[1].response_ids)
    assert torch.equal(outs[0].prompt_ids, outs[1].prompt_ids)


def test_sampled_responses_recompute_to_the_same_logprobs_with_either_path(tiny_model_dir):
    """Samples drawn after a shared prefill are scored by the plain forward pass exactly as
    the shared pass scores them: the cache really is the prompt's."""
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    torch.manual_seed(0)
    gen = HFEngine(model, tokenizer, share_prefix=True).generate(
        [tokenizer(p)["input_ids"] for p in PROMPTS], 4, max_new_tokens=6)
    batch = batch_from_generation(gen)
    with torch.no_grad():
        a = response_logprobs(model, batch, temperature=1.0, share_prefix=True)[0]
        b = response_logprobs(model, batch, temperature=1.0, share_prefix=False)[0]
    mask = batch.response_mask.bool()
    torch.testing.assert_close(a[mask], b[mask], rtol=1e-6, atol=1e-6)
    assert prefill_once(model, batch.input_ids[:1, :2], batch.attention_mask[:1, :2], 1) is None


def test_gradient_checkpointing_turns_sharing_off(tiny_model_dir):
    model = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    assert supports_prefix_cache(model)
    model.gradient_checkpointing_enable()
    assert not supports_prefix_cache(model)


def test_sharing_passes_the_cache_by_the_name_the_model_takes_without_deprecation_warnings(tiny_model_dir):
    """transformers 5 renamed ``past_key_values`` to ``cache`` (the old name warns on every call);
    a model whose forward still names ``past_key_values`` gets that name (issue 24)."""
    import inspect
    import warnings

    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    takes = inspect.signature(type(model).forward).parameters
    assert cache_kwarg(model) == ("cache" if "cache" in takes else "past_key_values")

    class OldStyle(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, use_cache=False):
            return input_ids

    assert cache_kwarg(OldStyle()) == "past_key_values"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, _, batch = _generation(tiny_model_dir)
        HFEngine(model, tokenizer).generate([tokenizer(p)["input_ids"] for p in PROMPTS], 3, max_new_tokens=4)
        hidden_with_shared_prompts(model, model.model, batch.input_ids, batch.attention_mask,
                                   batch.position_ids, batch.prompt_len, batch.response_len)
    assert not [w for w in caught if "past_key_values" in str(w.message)]
