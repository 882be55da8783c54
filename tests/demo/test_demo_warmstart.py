"""The supervised warm start: loss on the answer only, deterministic, and it learns."""

import pytest
import torch

from steadyrl.demo.model import build_tiny_model
from steadyrl.demo.task import VOCAB_CHARS, make_splits
from steadyrl.demo.tokenizer import build_char_tokenizer
from steadyrl.demo.warmstart import IGNORE_INDEX, SupervisedSettings, encode_supervised, warm_start


def _setup(seed=0):
    tok = build_char_tokenizer(VOCAB_CHARS)
    model = build_tiny_model(tok, hidden_size=64, n_heads=4, seed=seed)
    train, _ = make_splits(400, 0, seed=seed)
    return tok, model, train


def test_labels_cover_answer_and_eos_only():
    tok = build_char_tokenizer(VOCAB_CHARS)
    records = [{"prompt": "abc=", "answer": "cba"}, {"prompt": "ab=", "answer": "ba"}]
    ids, mask, labels = encode_supervised(tok, records)
    assert tok.decode(ids[0], skip_special_tokens=True) == "abc=cba"
    assert ids[0].tolist()[-1] == tok.eos_token_id
    assert labels[0].tolist() == [IGNORE_INDEX] * 5 + tok.convert_tokens_to_ids(list("cba")) + [tok.eos_token_id]
    assert mask[1].tolist() == [1] * 7 + [0] * 2  # right padding
    assert labels[1, -2:].tolist() == [IGNORE_INDEX] * 2


def test_a_few_steps_reduce_the_answer_loss():
    tok, model, train = _setup()
    out = warm_start(model, tok, train, steps=40, lr=3e-3, batch_size=16, seed=0)
    losses = out["losses"]
    assert len(losses) == out["steps"] == 40 and out["seconds"] > 0
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    assert not model.training


def test_same_seed_same_losses_and_weights():
    results = []
    for _ in range(2):
        tok, model, train = _setup(seed=2)
        results.append((warm_start(model, tok, train, steps=5, lr=1e-3, batch_size=8, seed=4)["losses"], model))
    (l1, m1), (l2, m2) = results
    assert l1 == l2
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p1, p2)


def test_zero_steps_leaves_the_model_unchanged():
    tok, model, train = _setup()
    before = [p.clone() for p in model.parameters()]
    assert warm_start(model, tok, train, steps=0, lr=1e-3, batch_size=8, seed=0)["losses"] == []
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_bad_supervised_settings_are_refused_before_any_step():
    tok, model, train = _setup()
    with pytest.raises(ValueError, match=r"need steps >= 0, batch_size >= 1, lr > 0; got 5, 0, 0.001"):
        warm_start(model, tok, train, steps=5, lr=1e-3, batch_size=0, seed=0)
    with pytest.raises(ValueError, match="lr > 0"):
        SupervisedSettings(steps=1, lr=0.0, batch_size=1, seed=0)
