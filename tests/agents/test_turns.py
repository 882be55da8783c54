"""A sampled turn kept as the message the template expects (steadyrl/agents/turns.py), on the real
templates of issue 32: never the raw text wrapped in the template's markers a second time, the
reasoning in ``reasoning_content``, and the check the step-wise drift uses to tell the two apart."""

import pytest
from support_realtemplates import family_tokenizer

from steadyrl.agents.turns import call_form, shape_turn, turn_renders

pytestmark = [pytest.mark.realdata]

Q = [{"role": "user", "content": "What is 1 + 2 + 4?"}]


def tokenizer(families, name):
    templates, by_name = families
    return family_tokenizer(by_name[name], templates), by_name[name].stops[0]


# (family, what the model wrote after the generation prompt, the content the template expects)
WRAPPED = [("Command-R7B", "<|START_RESPONSE|>8<|END_RESPONSE|>", "8"),
           ("upstage-Solar-Open-100B", "<|content|>8", "8"),
           ("meetkai-functionary-medium-v3.2", "all\n8", "8"),
           ("Cohere2MoE", "r0<|END_THINKING|><|START_TEXT|>8<|END_TEXT|>", "8")]


@pytest.mark.parametrize("name, sampled, content", WRAPPED)
def test_a_turn_is_kept_without_the_markers_the_template_writes_around_its_content(families, name, sampled, content):
    tok, end = tokenizer(families, name)
    raw = {"role": "assistant", "content": sampled}
    kept = shape_turn(tok, Q, sampled, raw, tools=None, end=end)
    assert kept["content"] == content
    assert turn_renders(tok, Q, sampled, kept, tools=None, end=end)
    assert not turn_renders(tok, Q, sampled, raw, tools=None, end=end)  # the raw text: wrapped a second time


def test_a_thinking_turn_keeps_its_reasoning_in_the_templates_field(families):
    tok, end = tokenizer(families, "Qwen3")
    kept = shape_turn(tok, Q, "<think>\nr0\n</think>\n\n8", {"role": "assistant", "content": "<think>\nr0\n</think>\n\n8"},
                      tools=None, end=end)
    # as vLLM's reasoning parser splits it: at </think>, nothing stripped (docs/agents.md, "Token truth"),
    # less the whitespace Qwen3's template writes itself ('<think>\n' r '\n</think>\n\n'): not content
    assert (kept["reasoning_content"], kept["content"]) == ("r0", "8")


def test_a_turn_whose_reasoning_the_template_drops_renders_as_the_template_holds_it(families):
    tok, end = tokenizer(families, "QwQ")
    sampled = "r0\n</think>\n\n8"  # after the generation prompt's <think>
    kept = shape_turn(tok, Q, sampled, {"role": "assistant", "content": sampled}, tools=None, end=end)
    assert (kept["reasoning_content"], kept["content"]) == ("r0\n", "\n\n8")
    assert turn_renders(tok, Q, sampled, kept, tools=None, end=end)


def test_arguments_take_openais_string_form_where_the_template_renders_it(families):
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call00000", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]}
    tok, _ = tokenizer(families, "meetkai-functionary-medium-v3.2")
    assert isinstance(call_form(tok, Q, call, tools=None)["tool_calls"][0]["function"]["arguments"], str)
    tok, _ = tokenizer(families, "Qwen3-Coder")  # it walks the arguments' keys: the object form
    assert call_form(tok, Q, call, tools=None)["tool_calls"][0]["function"]["arguments"] == {"a": 1, "b": 2}


@pytest.mark.parametrize("name", ["Command-R7B", "upstage-Solar-Open-100B", "meetkai-functionary-medium-v3.2"])
def test_stepwise_drift_reads_the_turns_the_conversation_holds_otherwise_than_sampled(families, name, monkeypatch):
    # issue 32: the raw text kept as content was wrapped a second time and the drift still read 0
    import support_conformance

    import steadyrl.rollout.episodes as episodes
    from steadyrl.agents.formats import parser_for_template

    tok, _ = tokenizer(families, name)
    family = families[1][name]
    args = (tok, "user", list(family.stops), family.kwargs or None, parser_for_template(tok.chat_template), "stepwise")
    assert support_conformance.episode(*args) == "exact"
    monkeypatch.setattr(episodes, "shape_turn", lambda tok, history, text, kept, **kw: kept)  # the old rollout
    assert "rollout/retokenize_drift" in support_conformance.episode(*args)
