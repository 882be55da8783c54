"""The stop tokens the start-up checks use are the ones generation stops on: the tokenizer's EOS
plus the generation config's ``eos_token_id`` list, read from the folder the tokenizer was saved in
before any model loads (Gemma closes turns with ``<end_of_turn>``, not its ``eos_token``)."""

import pytest
from agents.templates import chat_tokenizer

from steadyrl.agents.chat import TemplateError, check_template
from steadyrl.rollout.base import eos_token_ids

# Gemma's shape (written here): turns closed by <end_of_turn>, which is not eos_token
GEMMA_LIKE = ("{%- for m in messages %}{{- '<|im_start|>' + ('model' if m.role == 'assistant' else m.role) + '\\n' "
              "+ m.content | trim + '<eot>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
              "{{- '<|im_start|>model\\n' }}{%- endif %}")


def saved(tmp_path, stops):
    from transformers import AutoTokenizer, GenerationConfig

    tok = chat_tokenizer(GEMMA_LIKE, eos="<|im_end|>")
    tok.add_special_tokens({"additional_special_tokens": ["<eot>"]})
    tok.save_pretrained(tmp_path)
    if stops:
        GenerationConfig(eos_token_id=[tok.convert_tokens_to_ids(t) for t in stops]).save_pretrained(tmp_path)
    return AutoTokenizer.from_pretrained(tmp_path)


def test_start_up_stop_tokens_include_the_saved_generation_config(tmp_path):
    tok = saved(tmp_path, ["<|im_end|>", "<eot>"])
    assert [tok.decode([i]) for i in eos_token_ids(tok)] == ["<|im_end|>", "<eot>"]


def test_a_template_closing_turns_with_a_generation_stop_token_passes_the_probe(tmp_path):
    tok = saved(tmp_path, ["<|im_end|>", "<eot>"])
    ends = [tok.decode([i]) for i in eos_token_ids(tok)]
    check_template(tok, tools=None, observation_role="user", end_texts=ends)


def test_without_that_stop_token_the_probe_says_to_add_it_to_the_generation_config(tmp_path):
    tok = saved(tmp_path, [])
    ends = [tok.decode([i]) for i in eos_token_ids(tok)]
    with pytest.raises(TemplateError, match="does not close an assistant turn.*generation_config.json"):
        check_template(tok, tools=None, observation_role="user", end_texts=ends)
