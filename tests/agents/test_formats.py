"""The tool-call formats of published templates (agents/formats.py): each read back, with ids, and
malformed calls told to the model. Texts are as the real templates render them (the conformance
suite, tests/agents/test_real_templates.py, checks that against the templates themselves)."""

import pytest

from steadyrl.agents.formats import detect, parser_for_template
from steadyrl.agents.parsers import TOOL_PARSERS, ToolCall, load_parser

ADD = ToolCall("add", {"a": 1, "b": "x y"})


@pytest.mark.parametrize("name, text", [
    ("qwen3_coder", "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\nx y\n</parameter>\n"
                    "</function>\n</tool_call>"),
    ("glm45", "<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n<arg_key>b</arg_key>\n"
              "<arg_value>x y</arg_value>\n</tool_call>"),
    ("harmony", ' to=functions.add<|channel|>commentary json<|message|>{"a": 1, "b": "x y"}'),
    ("harmony", '<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1, "b": "x y"}<|call|>'),
    ("deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n"
                 '{"a": 1, "b": "x y"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    ("deepseek", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{"a": 1, "b": "x y"}'
                 "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    ("pythonic", '[add(a=1, b="x y")]'),
    ("command_r", '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "add", "parameters": '
                  '{"a": 1, "b": "x y"}}\n]<|END_ACTION|>'),
    ("mistral", '[TOOL_CALLS]add[ARGS]{"a": 1, "b": "x y"}'),
])
def test_each_format_reads_back_its_call(name, text):
    turn = TOOL_PARSERS[name](text)
    assert (turn.calls, turn.errors, turn.content) == ([ADD], [], "")
    assert TOOL_PARSERS["auto"](text).calls == [ADD]  # auto finds the same by the markers


def test_mistral_keeps_the_ids_the_model_wrote_in_both_versions():
    v3 = TOOL_PARSERS["mistral"]('[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": "x y"}, "id": "abc123def"}]')
    v11 = TOOL_PARSERS["mistral"]('[TOOL_CALLS]add[CALL_ID]abc123def[ARGS]{"a": 1, "b": "x y"}'
                                  '[TOOL_CALLS]add[CALL_ID]xyz987uvw[ARGS]{}')
    assert v3.calls == [ToolCall("add", ADD.arguments, "abc123def")]
    assert [c.id for c in v11.calls] == ["abc123def", "xyz987uvw"] and v11.calls[1].arguments == {}


def test_kimi_reads_every_call_of_a_section_with_its_id():
    text = ("Let me add.<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>"
            '{"a": 1, "b": "x y"}<|tool_call_end|><|tool_call_begin|>functions.mul:1<|tool_call_argument_begin|>'
            "{}<|tool_call_end|><|tool_calls_section_end|>")
    turn = TOOL_PARSERS["kimi_k2"](text)
    assert turn.calls == [ToolCall("add", ADD.arguments, "functions.add:0"), ToolCall("mul", {}, "functions.mul:1")]
    assert turn.content == "Let me add."


def test_plain_text_is_content_in_every_format():
    for name in ("qwen3_coder", "glm45", "kimi_k2", "harmony", "deepseek", "pythonic", "command_r", "mistral", "auto"):
        turn = TOOL_PARSERS[name]("The answer is 9.")
        assert (turn.content, turn.calls, turn.errors) == ("The answer is 9.", [], []), name


@pytest.mark.parametrize("name, text, says", [
    ("mistral", '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1,}]', "invalid JSON"),
    ("mistral", "[TOOL_CALLS]", "without a call"),
    ("glm45", "<tool_call>add\n<arg_key>a</arg_key>", "never closed"),
    ("qwen3_coder", "<tool_call>\n<function=add>\n<parameter=a>\n1", "never closed"),
    ("kimi_k2", '<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>{"a": '
                "<|tool_call_end|><|tool_calls_section_end|>", "invalid JSON"),
    ("pythonic", "[add(1, 2)]", "keyword=value"),
    ("command_r", "<|START_ACTION|>[{]<|END_ACTION|>", "invalid JSON"),
])
def test_a_malformed_call_is_one_error_line_that_shows_the_format(name, text, says):
    turn = TOOL_PARSERS[name](text)
    assert turn.calls == [] and len(turn.errors) == 1
    assert says in turn.errors[0] and "format:" in turn.errors[0] and "\n" not in turn.errors[0]


def test_auto_reads_llama_json_and_pythonic_calls_without_markers():
    assert TOOL_PARSERS["auto"]('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": "x y"}}').calls == [ADD]
    assert TOOL_PARSERS["auto"]('[add(a=1, b="x y")]').calls == [ADD]
    assert load_parser("auto") is TOOL_PARSERS["auto"]


def test_the_format_is_detected_from_a_template():
    assert parser_for_template("{{ '<tool_call>\\n<function=' + name }}") == "qwen3_coder"
    assert parser_for_template("{{- '<|python_tag|>' }}") == "llama3_json"
    assert parser_for_template("{{ '<|im_start|>' }}") == "hermes"  # no format named: the default
    assert detect("[TOOL_CALLS]add[ARGS]{}") == "mistral"
