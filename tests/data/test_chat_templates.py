"""render_prompt / encode_prompt / filter_by_length with a real (tiny, in-memory) tokenizer."""

import copy
import re

import pytest

from steadyrl.errors import ConfigError, DataError
from steadyrl.data import encode_prompt, filter_by_length, prompt_lengths, render_prompt

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]


@pytest.fixture
def templated(char_tokenizer):
    tok = copy.deepcopy(char_tokenizer)
    tok.chat_template = TEMPLATE
    return tok


def test_a_string_prompt_is_used_as_is_by_default(templated, char_tokenizer):
    assert render_prompt(templated, "2+2=") == "2+2="
    assert render_prompt(char_tokenizer, "2+2=") == "2+2="


def test_a_chat_prompt_is_rendered_with_the_generation_prompt(templated):
    assert render_prompt(templated, CHAT) == "<s><system>Be brief.\n<user>2+2?\n<assistant>"


def test_chat_template_true_wraps_a_string_as_one_user_message(templated):
    assert render_prompt(templated, "2+2?", chat_template=True) == "<s><user>2+2?\n<assistant>"


def test_chat_template_false_keeps_strings_and_refuses_messages(templated):
    assert render_prompt(templated, "2+2?", chat_template=False) == "2+2?"
    with pytest.raises(DataError, match="chat_template=False, but prompt .* is a list of chat messages"):
        render_prompt(templated, CHAT, chat_template=False)


def test_messages_without_a_template_are_a_clear_data_error(char_tokenizer):
    with pytest.raises(DataError, match="list of chat messages, but the tokenizer .* has no chat template"):
        render_prompt(char_tokenizer, CHAT)
    with pytest.raises(DataError, match="chat_template=True, but the tokenizer"):
        render_prompt(char_tokenizer, "hi", chat_template=True)


def test_the_no_template_errors_name_config_keys_that_exist(char_tokenizer):
    """The fix is a config key the user can set: ``data.chat_template`` or ``model.tokenizer``
    (there is no ``tokenizer.chat_template`` key)."""
    from steadyrl.config.loading import _all_paths
    from steadyrl.config.schema import Config

    for prompt, option in ((CHAT, None), ("hi", True)):
        with pytest.raises(DataError) as info:
            render_prompt(char_tokenizer, prompt, chat_template=option)
        named = set(re.findall(r"\b([a-z_]+\.[a-z_]+)=?", str(info.value)))
        assert named and named <= set(_all_paths(Config)), str(info.value)
        assert "model.tokenizer" in named
    assert "data.chat_template=false" in str(info.value)


def test_a_template_that_raises_becomes_a_data_error(templated):
    templated.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(DataError, match="chat template failed on prompt .*roles must alternate"):
        render_prompt(templated, CHAT)


def test_bad_chat_template_option_is_a_config_error(templated):
    with pytest.raises(ConfigError, match="chat_template='yes'"):
        render_prompt(templated, "x", chat_template="yes")


def test_encode_adds_special_tokens_only_without_a_template(templated):
    plain = encode_prompt(templated, "ab")
    assert plain[0] == templated.bos_token_id and len(plain) == 3  # <s> a b
    chat = encode_prompt(templated, [{"role": "user", "content": "ab"}])
    rendered = render_prompt(templated, [{"role": "user", "content": "ab"}])
    assert rendered.startswith("<s>") and chat.count(templated.bos_token_id) == 1  # not doubled
    assert prompt_lengths(templated, ["ab", [{"role": "user", "content": "ab"}]]) == [3, len(chat)]


def test_filter_by_length_drops_long_prompts_in_order(templated):
    records = [{"prompt": "a" * n, "id": n} for n in (3, 9, 1, 5)]
    kept, dropped = filter_by_length(records, templated, 6)  # +1 for <s>
    assert [r["id"] for r in kept] == [3, 1, 5] and dropped == 1
    assert kept[0] is records[0]  # not copied


def test_filter_by_length_counts_the_rendered_chat_prompt(templated):
    short = [{"role": "user", "content": "hi"}]
    n = len(encode_prompt(templated, short))
    assert filter_by_length([{"prompt": short}], templated, n) == ([{"prompt": short}], 0)
    with pytest.raises(DataError):
        filter_by_length([{"prompt": short}], templated, n - 1)


def test_all_prompts_too_long_says_how_many_and_how_long(templated):
    records = [{"prompt": "a" * 20}, {"prompt": "a" * 30}]
    with pytest.raises(DataError, match="all 2 prompts are longer than max_prompt_tokens=10 "
                                        r"\(the shortest has 21 tokens, the longest 31\)"):
        filter_by_length(records, templated, 10)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_max_prompt_tokens_must_be_a_positive_integer(templated, bad):
    with pytest.raises(ConfigError, match="max_prompt_tokens="):
        filter_by_length([{"prompt": "a"}], templated, bad)
