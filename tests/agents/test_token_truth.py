"""Token truth, round 3 (issue 41): each earlier turn held as a server's parsers hold it, ``single``
wherever the template is append-only under those shapes, step-wise accepted where it is exact, and a
drift metric that reads non-zero when a context differs from the conversation as the model wrote it.

Ground truth (tests/support_conformance.py): ``apply_chat_template`` of the conversation whose
assistant messages are the text the model wrote, split as vLLM's parsers split it
(steadyrl/agents/server.py). Real templates of the llama-cpp-python sdist (tests/support_sdist.py).
"""

import pytest
import torch
from support_conformance import episode, evaluate
from support_realtemplates import family_tokenizer

import steadyrl.rollout.episodes as episodes
from steadyrl.agents.chat import render
from steadyrl.agents.formats import parser_for_template
from steadyrl.agents.server import as_written, call_content, reasoning_split, server_message
from steadyrl.agents.turns import shape_turn

pytestmark = [pytest.mark.realdata]
torch.set_num_threads(1)

Q = [{"role": "user", "content": "What is 1 + 2 + 4?"}]
R1 = ["DeepSeek-R1-Distill-Qwen", "DeepSeek-R1-Distill-Llama", "llama-cpp-deepseek-r1"]


def _tok(families, name):
    templates, by_name = families
    return family_tokenizer(by_name[name], templates), by_name[name]


def _case(families, name, mode, turn_mode):
    templates, by_name = families
    return evaluate(by_name[name], mode, templates, turn_mode=turn_mode)


def _episode(families, name, mode, turn_mode):
    tok, family = _tok(families, name)
    return episode(tok, mode, list(family.stops), family.kwargs or None, parser_for_template(tok.chat_template),
                   turn_mode)


# ---- the rule itself (vLLM's reasoning and tool parsers) -------------------------------------------

def test_the_reasoning_split_keeps_what_follows_think_unstripped():
    assert reasoning_split("\nr\n</think>\n\n8") == ("\nr\n", "\n\n8")  # vLLM's deepseek_r1: "\n\n8"
    assert reasoning_split("<think>\nr\n</think>\n\n8") == ("\nr\n", "\n\n8")
    assert reasoning_split("8") == (None, "8")
    # only the first </think> splits; a second one is the answer's
    assert reasoning_split("r</think>a</think>b") == ("r", "a</think>b")


def test_the_content_beside_calls_is_the_text_before_the_first_call_unstripped():
    assert call_content("\n\n<tool_call>\n{}\n</tool_call>") == "\n\n"  # Hermes: model_output[:find(<tool_call>)]
    assert call_content("Let me add.<｜tool▁calls▁begin｜>...") == "Let me add."
    assert call_content('[add(a=1, b=2)]') == ""  # no marker: the turn is all calls


def test_a_template_without_a_reasoning_parser_keeps_the_block_in_the_content():
    smol = "{{ '<think>\\n\\n</think>\\n' }}{{ messages[0].content }}"  # names </think>, reads no split
    assert server_message("<think>r</think>\n8", smol) == {"role": "assistant", "content": "<think>r</think>\n8"}
    assert as_written("8", "{{ m.content.split('</think>') }}", True) is None  # no </think>: the rule is silent


def test_the_split_is_linear_in_what_the_model_wrote():
    import time

    hostile = "<think>" * 200_000 + "</think>" * 200_000 + "<tool_call>" * 50_000
    start = time.perf_counter()
    message = server_message(hostile, "{{ reasoning_content }}</think>", [{"id": "x", "function": {"name": "f"}}])
    assert time.perf_counter() - start < 1.0
    assert message["reasoning_content"].startswith("<think>") and message["content"].startswith("</think>")


# ---- 1. DeepSeek-R1: the '\n\n' the model wrote after </think> -------------------------------------

@pytest.mark.parametrize("name", R1)
def test_r1_keeps_the_blank_line_the_model_wrote_after_think(families, name):
    tok, family = _tok(families, name)
    sampled = "\nr0\n</think>\n\n8"  # after the generation prompt's <think>\n
    kept = shape_turn(tok, Q, sampled, {"role": "assistant", "content": sampled}, tools=None, end=family.stops[0])
    assert kept["content"] == "\n\n8"
    context = render(tok, Q + [kept, {"role": "user", "content": "Wrong."}], tools=None, add_generation_prompt=True)
    assert "<｜Assistant｜>\n\n8" in context


@pytest.mark.parametrize("name", R1[1:])  # the Distill-Qwen copy's generation prompt closes </think>: no reasoning
def test_r1_user_observations_run_stepwise_exactly_and_the_old_stripping_is_drift(families, name, monkeypatch):
    assert _case(families, name, "user", "stepwise").verdict == "exact"
    assert _episode(families, name, "user", "stepwise") == "exact"
    shaped = episodes.shape_turn

    def stripped(*args, **kw):  # the old rollout: the answer kept without the '\n\n' the model wrote
        kept = shaped(*args, **kw)
        return {**kept, "content": kept["content"].lstrip("\n")}

    monkeypatch.setattr(episodes, "shape_turn", stripped)
    assert "rollout/retokenize_drift" in _episode(families, name, "user", "stepwise")


def test_qwq_tools_keep_the_newlines_before_the_call_as_content(families):
    tok, family = _tok(families, "QwQ")
    call = {"id": "call00000", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    sampled = 'r0\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    kept = shape_turn(tok, Q, sampled, {"role": "assistant", "content": "", "tool_calls": [call]}, tools=None,
                      end=family.stops[0])
    # Hermes' parser returns '\n\n'; QwQ writes the '\n' before <tool_call> itself: not content
    assert kept["content"] == "\n" and kept["reasoning_content"] == "r0\n"
    later = render(tok, Q + [kept, {"role": "tool", "name": "add", "content": "3", "tool_call_id": "call00000"}],
                   tools=None, add_generation_prompt=True)
    assert "<|im_start|>assistant\n\n<tool_call>" in later  # QwQ writes '\n' + content before the call
    assert _episode(families, "QwQ", "tools", "stepwise") == "exact"


# ---- 2. append-only under the server's shapes: single --------------------------------------------

@pytest.mark.parametrize("name, mode", [("HuggingFaceTB-SmolLM3-3B", "user"), ("Cohere2MoE", "tools")])
def test_append_only_templates_that_keep_reasoning_run_single(families, name, mode):
    case = _case(families, name, mode, "single")
    assert case.verdict == "exact" and case.episode == "exact"


# ---- 3. step-wise accepted where it is exact ------------------------------------------------------

@pytest.mark.parametrize("name, mode", [("deepseek-ai-DeepSeek-V3.2", "tools"), ("Cohere2MoE", "user"),
                                        ("google-gemma-4-31B-it-interleaved", "tools"),
                                        ("NVIDIA-Nemotron-Nano-v2", "tools"), ("google-gemma-4-31B-it", "tools"),
                                        ("Reka-Edge", "user"), ("Reka-Edge", "tools")])
def test_templates_that_re_render_earlier_turns_are_trained_stepwise(families, name, mode):
    case = _case(families, name, mode, "stepwise")
    assert case.verdict == "exact" and case.episode == "exact"


def test_a_template_that_renders_no_call_is_still_refused_stepwise(families):
    # LFM2.5-Instruct lists the tools but writes no call text: no turn the model writes is a call
    case = _case(families, "LFM2.5-Instruct", "tools", "stepwise")
    assert "writes a call outside the assistant turn" in case.verdict


def test_gemma4_calls_take_the_object_form_its_template_walks(families):
    # gemma-4 writes its own braces around the arguments: the string form rendered call:add{{"a": 1}}
    from steadyrl.agents.turns import call_form

    tok, _ = _tok(families, "google-gemma-4-31B-it-interleaved")
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call00000", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]}
    assert call_form(tok, Q, call, tools=None)["tool_calls"][0]["function"]["arguments"] == {"a": 1, "b": 2}


# ---- 6. whitespace the template writes is not content ---------------------------------------------

# a template without jinja whitespace control (as DeepSeek-V3.x copies are shipped): the lines of
# its loop write '\n    ' around every answer, and again on every render
LOOSE = """{% for m in messages %}
    {% if m.role == 'user' %}<｜User｜>{{ m.content }}{% elif m.role == 'assistant' %}<｜Assistant｜><think>{{ m.reasoning_content }}</think>
    {{ m.content }}
    <｜end▁of▁sentence｜>{% endif %}
{% endfor %}{% if add_generation_prompt %}<｜Assistant｜><think>{% endif %}"""


def test_whitespace_the_template_writes_around_the_answer_is_not_content(tmp_path):
    from support_realtemplates import Family

    (tmp_path / "loose.jinja").write_text(LOOSE)
    family = Family("loose", "loose.jinja", "<｜end▁of▁sentence｜>", ("<｜end▁of▁sentence｜>",),
                    specials=("<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"))
    tok = family_tokenizer(family, tmp_path)
    sampled = "r0</think>\n    8\n    "  # what the template shows the model writing after <think>
    kept = shape_turn(tok, Q, sampled, {"role": "assistant", "content": sampled}, tools=None, end=family.stops[0])
    assert kept == {"role": "assistant", "reasoning_content": "r0", "content": "8"}
    later = render(tok, Q + [kept, {"role": "user", "content": "Wrong."}], tools=None, add_generation_prompt=True)
    assert "</think>\n    8\n    <｜end▁of▁sentence｜>" in later  # written once, not twice
    for turn_mode in ("stepwise", "single"):
        case = evaluate(family, "user", tmp_path, turn_mode=turn_mode)
        assert case.verdict == "exact" and case.episode == "exact", (turn_mode, case)
