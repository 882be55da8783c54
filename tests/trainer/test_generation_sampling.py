"""The HF engine samples from ``softmax(logits / temperature)`` (truncated only by the top-k / top-p
the caller asked for), as the loss assumes, whatever the model's ``generation_config.json`` says:
transformers would otherwise fill every setting a call leaves unset from it (and top-k from its
own default of 50). Greedy decoding is plain argmax for the same reason."""

import pytest
import torch
from transformers import GenerationConfig

from steadyrl.models import load_policy, load_tokenizer
from steadyrl.rollout import HFEngine

CPU = torch.device("cpu")
PROMPT = "abc="
SAMPLES = 8000


def _hostile_config(tokenizer, favourite: int) -> GenerationConfig:
    """A generation config of the kind instruct models ship, made as unlike the plain distribution
    as possible: a low temperature, top-k 2, top-p 0.5, min-p, a repetition penalty, the most
    likely token suppressed and EOS forbidden at the first position."""
    return GenerationConfig(
        do_sample=True, temperature=0.3, top_k=2, top_p=0.5, min_p=0.4, repetition_penalty=3.0,
        no_repeat_ngram_size=1, suppress_tokens=[favourite], min_new_tokens=1,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )


def _model_and_first_token_logits(tiny_model_dir):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    ids = tokenizer(PROMPT)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    return model, tokenizer, ids, logits


@pytest.mark.parametrize("share_prefix", [True, False])
@pytest.mark.parametrize("temperature,top_k", [(1.0, 0), (0.7, 4)])
def test_sampling_ignores_the_models_generation_config(tiny_model_dir, share_prefix, temperature, top_k):
    model, tokenizer, ids, logits = _model_and_first_token_logits(tiny_model_dir)
    shipped = _hostile_config(tokenizer, favourite=int(logits.argmax()))
    model.generation_config = shipped

    torch.manual_seed(0)
    gen = HFEngine(model, tokenizer, share_prefix=share_prefix).generate(
        [ids], SAMPLES, max_new_tokens=1, temperature=temperature, top_p=1.0, top_k=top_k)

    expected = torch.softmax(logits / temperature, -1)
    if top_k:
        keep = torch.zeros_like(expected, dtype=torch.bool)
        keep[expected.topk(top_k).indices] = True
        expected = torch.where(keep, expected, 0.0) / expected[keep].sum()
    counts = torch.bincount(gen.response_ids[:, 0], minlength=len(expected)).double()
    total_variation = 0.5 * (counts / SAMPLES - expected).abs().sum().item()
    # ~0.02 is sampling noise at 8,000 draws over 13 tokens; the shipped config would give > 0.5
    assert total_variation < 0.05, (total_variation, counts.tolist(), expected.tolist())
    assert model.generation_config is shipped  # put back after the call


@pytest.mark.parametrize("share_prefix", [True, False])
def test_greedy_decoding_is_the_argmax_whatever_the_model_ships(tiny_model_dir, share_prefix):
    model, tokenizer, ids, logits = _model_and_first_token_logits(tiny_model_dir)
    model.generation_config = _hostile_config(tokenizer, favourite=int(logits.argmax()))
    gen = HFEngine(model, tokenizer, share_prefix=share_prefix).generate(
        [ids], 1, max_new_tokens=1, do_sample=False)
    assert gen.response_ids[0, 0].item() == int(logits.argmax())


def test_the_models_generation_config_is_restored_when_generate_fails(tiny_model_dir):
    model, tokenizer, ids, _ = _model_and_first_token_logits(tiny_model_dir)
    shipped = model.generation_config
    with pytest.raises(ValueError):
        HFEngine(model, tokenizer).generate([ids], 2, max_new_tokens=1, temperature=-1.0)
    assert model.generation_config is shipped
