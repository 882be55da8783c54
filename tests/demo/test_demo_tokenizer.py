"""The character tokenizer: one token per character, special tokens, and a save/load round trip."""

import pytest
from transformers import AutoTokenizer

from steadyrl.demo.task import VOCAB_CHARS
from steadyrl.demo.tokenizer import BOS, EOS, PAD, UNK, build_char_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(VOCAB_CHARS)


def test_every_character_is_one_token_after_bos(tok):
    ids = tok("abc=")["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert tok.convert_ids_to_tokens(ids[1:]) == ["a", "b", "c", "="]


def test_special_tokens_are_distinct_and_first(tok):
    ids = [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id]
    assert ids == [0, 1, 2, 3]
    assert (tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token) == (PAD, BOS, EOS, UNK)
    assert len(tok) == 4 + len(VOCAB_CHARS)


def test_decode_skipping_specials_gives_the_plain_string_back(tok):
    ids = tok("hgfe=abc")["input_ids"] + [tok.eos_token_id, tok.pad_token_id]
    assert tok.decode(ids, skip_special_tokens=True) == "hgfe=abc"


def test_no_bos_without_special_tokens(tok):
    assert tok("ab", add_special_tokens=False)["input_ids"] == tok.convert_tokens_to_ids(["a", "b"])


def test_unknown_character_maps_to_unk(tok):
    assert tok("aZ", add_special_tokens=False)["input_ids"] == [tok.convert_tokens_to_ids("a"), tok.unk_token_id]


def test_padding_is_on_the_left(tok):
    batch = tok(["ab=", "abcd="], padding=True)
    assert batch["input_ids"][0][:2] == [tok.pad_token_id] * 2
    assert batch["attention_mask"][0] == [0, 0, 1, 1, 1, 1]


def test_whitespace_and_newlines_are_characters_too():
    tok = build_char_tokenizer("ab \n")
    assert tok.decode(tok("a b\nb")["input_ids"], skip_special_tokens=True) == "a b\nb"


def test_round_trip_through_save_pretrained(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "cab=bac"
    assert loaded(text)["input_ids"] == tok(text)["input_ids"]
    assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 1, 2)
    assert loaded.padding_side == "left"
    assert loaded.get_vocab() == tok.get_vocab()


@pytest.mark.parametrize("alphabet", ["", "abca"])
def test_bad_alphabet_is_rejected(alphabet):
    with pytest.raises(ValueError, match="alphabet"):
        build_char_tokenizer(alphabet)
