"""The reversal task: disjoint deterministic splits, the reward, and the accuracy measurement."""

import pytest
import torch

from steadyrl.demo.model import build_tiny_model
from steadyrl.demo.task import (
    LETTERS,
    VOCAB_CHARS,
    exact_match_accuracy,
    format_prompt,
    generate_completions,
    make_splits,
    reverse_reward,
)
from steadyrl.demo.tokenizer import build_char_tokenizer


def test_records_are_prompt_and_reversed_answer():
    train, held_out = make_splits(50, 20, seed=0)
    for r in train + held_out:
        assert set(r) == {"prompt", "answer"}
        text = r["prompt"][:-1]
        assert r["prompt"] == format_prompt(text) == text + "="
        assert r["answer"] == text[::-1]
        assert 3 <= len(text) <= 6 and set(text) <= set(LETTERS)


def test_splits_are_disjoint_and_of_the_asked_sizes():
    train, held_out = make_splits(2000, 500, seed=1)
    assert len(train) == 2000 and len(held_out) == 500
    train_prompts = {r["prompt"] for r in train}
    assert len(train_prompts) == 2000
    assert train_prompts.isdisjoint(r["prompt"] for r in held_out)


def test_splits_are_deterministic_per_seed():
    assert make_splits(100, 30, seed=5) == make_splits(100, 30, seed=5)
    assert make_splits(100, 30, seed=5) != make_splits(100, 30, seed=6)


def test_lengths_follow_the_range():
    train, _ = make_splits(300, 0, min_len=5, max_len=5, seed=0)
    assert {len(r["answer"]) for r in train} == {5}


@pytest.mark.parametrize(
    "kwargs",
    [dict(min_len=0), dict(min_len=5, max_len=4), dict(letters="ab="), dict(letters="aa")],
)
def test_bad_split_arguments_are_rejected(kwargs):
    with pytest.raises(ValueError):
        make_splits(10, 10, **kwargs)


def test_asking_for_more_strings_than_exist_is_rejected():
    with pytest.raises(ValueError, match="too many"):
        make_splits(400, 400, min_len=3, max_len=3, letters="abcdefgh")


def test_reward_is_one_for_the_exact_answer_only():
    prompts = ["abc="] * 6
    completions = ["cba", " cba\n", "cb", "cbaa", "abc", ""]
    assert reverse_reward(prompts, completions, ["cba"] * 6) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_reward_accepts_extra_columns_and_checks_lengths():
    assert reverse_reward(["ab="], ["ba"], ["ba"], trainer_state={"step": 3}) == [1.0]
    with pytest.raises(ValueError, match="one length"):
        reverse_reward(["ab="], ["ba", "ab"], ["ba"])


def test_generate_completions_is_left_padded_and_keeps_the_training_flag():
    tok = build_char_tokenizer(VOCAB_CHARS)
    model = build_tiny_model(tok, hidden_size=32, n_heads=2)
    model.train()
    prompt_ids, completion_ids = generate_completions(model, tok, ["ab=", "abcdef="], 4, do_sample=True)
    assert model.training
    assert prompt_ids[0, 0] == tok.pad_token_id and prompt_ids[1, 0] == tok.bos_token_id
    assert completion_ids.shape[0] == 2 and completion_ids.shape[1] <= 4


class _Oracle(torch.nn.Module):
    """Stands in for a model in ``exact_match_accuracy``: ``generate`` writes the right answer."""

    def __init__(self, tok, wrong_every: int = 0):
        super().__init__()
        self.tok, self.wrong_every = tok, wrong_every

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        rows = []
        for i, ids in enumerate(input_ids):
            text = self.tok.decode(ids, skip_special_tokens=True)[:-1]
            answer = text[::-1] if not self.wrong_every or i % self.wrong_every else text[::-1] + "a"
            answer_ids = self.tok(answer, add_special_tokens=False)["input_ids"]
            rows.append(ids.tolist() + answer_ids + [self.tok.eos_token_id])
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.tok.pad_token_id] * (width - len(r)) for r in rows])


def test_exact_match_accuracy_counts_correct_completions():
    tok = build_char_tokenizer(VOCAB_CHARS)
    _, held_out = make_splits(0, 40, seed=0)
    assert exact_match_accuracy(_Oracle(tok), tok, held_out, 8, batch_size=16) == 1.0
    assert exact_match_accuracy(_Oracle(tok, wrong_every=4), tok, held_out, 8, batch_size=8) == 0.75
