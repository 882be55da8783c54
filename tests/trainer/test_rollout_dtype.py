"""``rollout.dtype``: the HF engine samples with its own copy of the policy in another precision
than the trainer's and reports the sampled tokens' log-probs in it, so the training-inference gap
is real on a CPU; null keeps the engine on the training model itself (no log-probs, no copy)."""

import pytest
import torch

from steadyrl.config import load_config
from steadyrl.errors import ConfigError
from steadyrl.models import load_policy, load_tokenizer
from steadyrl.rollout import HFEngine, build_engine, check_rollout_dtype
from steadyrl.trainer.batch import batch_from_generation
from steadyrl.trainer.forward import response_logprobs

torch.set_num_threads(1)
CPU = torch.device("cpu")


def _engine(tiny_model_dir, dtype):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    return model, tokenizer, HFEngine(model, tokenizer, dtype=dtype)


def _trainer_logprobs(model, gen, temperature):
    return response_logprobs(model, batch_from_generation(gen), temperature=temperature)[0]


def test_a_bf16_engine_reports_its_own_logprobs_which_differ_from_the_fp32_trainers(tiny_model_dir):
    model, tokenizer, engine = _engine(tiny_model_dir, torch.bfloat16)
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.float32  # the trainer's model is untouched
    torch.manual_seed(0)
    gen = engine.generate([tokenizer("abc=")["input_ids"], tokenizer("12+3=")["input_ids"]], 4,
                          max_new_tokens=6, temperature=0.8)
    assert gen.rollout_logprobs is not None and gen.rollout_logprobs.shape == gen.response_ids.shape
    mask = gen.response_mask.bool()
    assert (gen.rollout_logprobs[~mask] == 0).all()
    train = _trainer_logprobs(model, gen, 0.8)
    gap = (train - gen.rollout_logprobs)[mask].abs()
    assert gap.max() > 1e-4  # bf16 against fp32: a real gap
    assert gap.max() < 0.5   # but the same policy
    # the engine's log-probs are the bf16 copy's own: recomputed through it they agree
    again = _trainer_logprobs(engine.model, gen, 0.8)
    assert torch.allclose(again[mask], gen.rollout_logprobs[mask], atol=0.05)


def test_an_engine_without_dtype_generates_with_the_training_model_and_reports_no_logprobs(tiny_model_dir):
    model, tokenizer, engine = _engine(tiny_model_dir, None)
    assert engine.model is model
    gen = engine.generate([tokenizer("abc=")["input_ids"]], 2, max_new_tokens=3)
    assert gen.rollout_logprobs is None


def test_update_weights_refreshes_the_engines_copy_from_the_trainers_weights(tiny_model_dir):
    model, _, engine = _engine(tiny_model_dir, torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.25)
    engine.update_weights(model)
    for (name, mine), theirs in zip(engine.model.named_parameters(), model.parameters()):
        assert mine.dtype == torch.bfloat16, name
        assert torch.equal(mine, theirs.to(torch.bfloat16)), name


def test_greedy_decoding_with_a_rollout_dtype_reports_no_logprobs(tiny_model_dir):
    _, tokenizer, engine = _engine(tiny_model_dir, torch.bfloat16)
    gen = engine.generate([tokenizer("abc=")["input_ids"]], 1, max_new_tokens=3, do_sample=False)
    assert gen.rollout_logprobs is None


def test_build_engine_reads_rollout_dtype(tiny_model_dir):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    config = load_config(None, ["rollout.dtype=bfloat16"])
    engine = build_engine("hf", model, tokenizer, config.rollout)
    assert engine.dtype == torch.bfloat16 and engine.model is not model
    assert build_engine("hf", model, tokenizer, load_config(None, []).rollout).model is model


def test_rollout_dtype_is_null_by_default_and_refuses_unknown_values():
    assert load_config(None, []).rollout.dtype is None
    with pytest.raises(ConfigError, match="rollout.dtype"):
        load_config(None, ["rollout.dtype=bf16"])


def test_float16_rollouts_are_refused_on_the_cpu_naming_the_key_and_valid_values():
    with pytest.raises(ConfigError, match=r"rollout\.dtype.*float16.*bfloat16"):
        check_rollout_dtype("float16", CPU)
    check_rollout_dtype("bfloat16", CPU)
    check_rollout_dtype(None, CPU)


def test_the_rollout_logprobs_are_the_same_whatever_the_row_chunks(tiny_model_dir, monkeypatch):
    import steadyrl.rollout.hf as hf

    _, tokenizer, engine = _engine(tiny_model_dir, torch.bfloat16)
    torch.manual_seed(1)
    gen = engine.generate([tokenizer("abc=")["input_ids"], tokenizer("7+8=")["input_ids"]], 3, max_new_tokens=4)
    args = (engine.model, gen.prompt_ids, gen.prompt_mask, gen.response_ids, gen.response_mask, 1.0)
    whole = hf.sampled_logprobs(*args)
    monkeypatch.setattr(hf, "LOGITS_BUDGET", 1)  # one row a forward pass
    torch.testing.assert_close(hf.sampled_logprobs(*args), whole, rtol=0, atol=2e-2)
    torch.testing.assert_close(whole, gen.rollout_logprobs)
