"""Tool-call parsers on the formats real models write: Hermes/Qwen blocks and Llama-3 JSON."""

import textwrap

import pytest

from steadyrl.agents.parsers import TOOL_PARSERS, ParsedTurn, ToolCall, load_parser
from steadyrl.errors import ConfigError

hermes = TOOL_PARSERS["hermes"]
llama = TOOL_PARSERS["llama3_json"]


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


# --- hermes ----------------------------------------------------------------------------------


def test_hermes_reads_a_qwen_call_and_keeps_the_text_around_it():
    text = ("<think>\nI need the sum.\n</think>\n\nLet me add them.\n"
            + block('{"name": "add", "arguments": {"a": 2, "b": 3}}'))
    turn = hermes(text)
    assert turn.calls == [ToolCall("add", {"a": 2, "b": 3})]
    assert turn.content == "<think>\nI need the sum.\n</think>\n\nLet me add them."
    assert turn.errors == []


def test_hermes_reads_several_calls_in_one_turn_in_order():
    text = (block('{"name": "add", "arguments": {"a": 1, "b": 2}}') + "\n"
            + block('{"name": "mul", "arguments": {"a": 3, "b": 4}}') + "\nthen done")
    turn = hermes(text)
    assert [c.name for c in turn.calls] == ["add", "mul"]
    assert turn.calls[1].arguments == {"a": 3, "b": 4}
    assert turn.content == "then done"


def test_hermes_without_blocks_is_all_content():
    assert hermes("  The answer is 5.\n") == ParsedTurn(content="The answer is 5.", calls=[], errors=[])


def test_hermes_bad_json_is_an_error_line_and_the_good_calls_still_count():
    text = block('{"name": "add", "arguments": {"a": 1,}}') + block('{"name": "now", "arguments": {}}')
    turn = hermes(text)
    assert turn.calls == [ToolCall("now", {})]
    assert len(turn.errors) == 1
    assert turn.errors[0].startswith("tool call 1: invalid JSON")
    assert "<tool_call>" in turn.errors[0]  # the model is told the expected format
    assert "\n" not in turn.errors[0]


def test_hermes_an_unclosed_block_at_the_end_is_an_error():
    turn = hermes("Calling now.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\"")
    assert turn.calls == []
    assert turn.content == "Calling now."
    assert "never closed" in turn.errors[0]


def test_hermes_a_stray_closing_tag_is_an_error():
    turn = hermes("oops</tool_call> " + block('{"name": "f", "arguments": {}}'))
    assert turn.calls == [ToolCall("f", {})]
    assert "without a <tool_call>" in turn.errors[0]


@pytest.mark.parametrize("body, why", [
    ('{"arguments": {"a": 1}}', 'missing "name"'),
    ('{"name": "", "arguments": {}}', 'missing "name"'),
    ('{"name": "add", "arguments": [1, 2]}', '"arguments" must be a JSON object'),
    ('{"name": "add", "arguments": "not json"}', '"arguments" must be a JSON object'),
    ('["add", {"a": 1}]', "expected a JSON object"),
])
def test_hermes_malformed_calls_say_what_is_wrong(body, why):
    turn = hermes(block(body))
    assert turn.calls == []
    assert why in turn.errors[0]


def test_hermes_accepts_no_arguments_and_double_encoded_arguments():
    turn = hermes(block('{"name": "now"}') + block('{"name": "add", "arguments": "{\\"a\\": 1}"}'))
    assert turn.calls == [ToolCall("now", {}), ToolCall("add", {"a": 1})]


# --- llama3_json -----------------------------------------------------------------------------


def test_llama_reads_a_json_call_with_parameters():
    turn = llama('{"name": "get_weather", "parameters": {"city": "Paris"}}')
    assert turn == ParsedTurn(content="", calls=[ToolCall("get_weather", {"city": "Paris"})], errors=[])


def test_llama_reads_a_call_after_the_python_tag_and_accepts_arguments():
    turn = llama('<|python_tag|>{"name": "add", "arguments": {"a": 1, "b": 2}}')
    assert turn.calls == [ToolCall("add", {"a": 1, "b": 2})]


def test_llama_reads_several_calls_separated_by_semicolons_even_inside_strings():
    text = '{"name": "say", "parameters": {"text": "a; b"}}; {"name": "add", "parameters": {"a": 1}};'
    turn = llama(text)
    assert turn.calls == [ToolCall("say", {"text": "a; b"}), ToolCall("add", {"a": 1})]
    assert turn.errors == []


def test_llama_plain_text_is_content_with_no_call():
    for text in ["The answer is 5.", "{x} is a set, not JSON", "Use {\"name\": ...} to call"]:
        turn = llama(text)
        assert turn == ParsedTurn(content=text, calls=[], errors=[])


def test_llama_bad_json_after_the_python_tag_is_an_error():
    turn = llama('<|python_tag|>{"name": "add", "parameters": {"a": 1')
    assert turn.calls == [] and turn.content == ""
    assert turn.errors[0].startswith("tool call 1: invalid JSON")
    assert '"parameters"' in turn.errors[0]


def test_llama_a_bad_second_call_keeps_the_first():
    turn = llama('{"name": "add", "parameters": {"a": 1}}; {"name": "add", "parameters": 5}')
    assert turn.calls == [ToolCall("add", {"a": 1})]
    assert '"parameters" must be a JSON object' in turn.errors[0]


def test_llama_text_after_the_last_call_is_content():
    turn = llama('{"name": "add", "parameters": {"a": 1}}\nI will wait for the result.')
    assert turn.calls == [ToolCall("add", {"a": 1})]
    assert turn.content == "I will wait for the result."


# --- load_parser -----------------------------------------------------------------------------


def test_load_parser_returns_the_registered_parsers():
    assert load_parser("hermes") is hermes
    assert load_parser(" llama3_json ") is llama


def test_an_unknown_parser_name_names_the_field_the_value_and_the_valid_names():
    with pytest.raises(ConfigError) as err:
        load_parser("hermez")
    message = str(err.value)
    assert "rollout.multi_turn.tool_parser" in message and "'hermez'" in message
    assert "'hermes'" in message and "'llama3_json'" in message


@pytest.fixture
def parser_file(tmp_path):
    path = tmp_path / "my_parser.py"
    path.write_text(textwrap.dedent("""
        from steadyrl.agents.parsers import ParsedTurn, ToolCall

        def full(text):
            return ParsedTurn(content="c", calls=[ToolCall("f", {"x": text})], errors=[])

        def calls(text):
            return [ToolCall("f", {})]

        def pairs(text):
            return [("f", {"n": 1}), ("g", "not an object")]

        def wrong(text):
            return {"name": "f"}

        def two_args(text, other):
            return []

        NOT_CALLABLE = 3
    """))
    return path


def test_a_user_parser_returning_a_parsed_turn_is_used_as_is(parser_file):
    assert load_parser(f"{parser_file}:full")("t") == ParsedTurn("c", [ToolCall("f", {"x": "t"})], [])


def test_a_user_parser_returning_calls_or_pairs_is_normalised(parser_file):
    assert load_parser(f"{parser_file}:calls")(" hi ") == ParsedTurn("hi", [ToolCall("f", {})], [])
    turn = load_parser(f"{parser_file}:pairs")("x")
    assert turn.calls == [ToolCall("f", {"n": 1})]
    assert "tool call 2 (g)" in turn.errors[0]


def test_a_user_parser_returning_something_else_is_a_type_error(parser_file):
    with pytest.raises(TypeError, match="expected a ParsedTurn"):
        load_parser(f"{parser_file}:wrong")("x")


@pytest.mark.parametrize("attr, why", [
    ("missing", "has no attribute 'missing'"),
    ("NOT_CALLABLE", "not a callable"),
    ("two_args", "fn(text)"),
])
def test_a_bad_user_parser_is_refused_at_load(parser_file, attr, why):
    with pytest.raises(ConfigError, match="rollout.multi_turn.tool_parser") as err:
        load_parser(f"{parser_file}:{attr}")
    assert why in str(err.value)


def test_a_missing_parser_file_is_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_parser(f"{tmp_path}/nope.py:parse")
