"""The tiny model: built from a config, special ids wired in, saved and reloaded bit for bit."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from steadyrl.demo.model import build_tiny_model
from steadyrl.demo.task import VOCAB_CHARS
from steadyrl.demo.tokenizer import build_char_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(VOCAB_CHARS)


def _small(tok, seed=0):
    return build_tiny_model(tok, hidden_size=32, n_heads=2, seed=seed)


def test_special_ids_are_in_config_and_generation_config(tok):
    model = _small(tok)
    for cfg in (model.config, model.generation_config):
        assert (cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id) == (0, 1, 2)
    assert model.config.vocab_size == len(tok)


def test_no_dropout_and_eval_mode(tok):
    model = _small(tok)
    assert not model.training
    assert model.config.attention_dropout == 0.0
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))


def test_same_seed_same_weights_and_global_rng_untouched(tok):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = _small(tok, seed=7)
    after = torch.rand(1)
    b = _small(tok, seed=7)
    c = _small(tok, seed=8)
    assert torch.equal(before, after)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_save_and_reload_gives_identical_logits(tok, tmp_path):
    model = _small(tok, seed=3)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    loaded.eval()
    batch = tok(["abc=", "hgfedc="], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, loaded(**batch).logits)
    assert loaded.generation_config.eos_token_id == tok.eos_token_id


def test_generate_stops_at_eos_and_pads_after(tok):
    model = _small(tok)
    batch = tok(["ab=", "abcd="], return_tensors="pt", padding=True)
    out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape[0] == 2 and out.shape[1] <= batch["input_ids"].shape[1] + 4


def test_bad_head_count_is_rejected(tok):
    with pytest.raises(ValueError, match="n_heads"):
        build_tiny_model(tok, hidden_size=30, n_heads=4)
