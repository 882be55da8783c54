"""The call formats of gemma-3's and Llama-4's published templates, xLAM's and InternLM2's
(agents/pythonic_formats.py): what each reads, what it refuses, and hostile text. The round trips
through the real templates are in tests/agents/test_pypi_templates.py (they need the download);
linearity is in test_parser_linearity.py."""

from __future__ import annotations

import pytest

from steadyrl.agents.formats import parse_auto, parser_for_template
from steadyrl.agents.parsers import TOOL_PARSERS, ToolCall


def calls(name: str, text: str):
    turn = TOOL_PARSERS[name](text)
    return [(c.name, c.arguments) for c in turn.calls], turn.errors, turn.content


# --- gemma3_pythonic -----------------------------------------------------------------------------

def test_gemma3_reads_arguments_with_no_comma_between_them():
    # what vLLM's gemma-3 pythonic template renders: its `first` flag never leaves the loop body
    assert calls("gemma3_pythonic", '[add(a=1b=2), say(text="x, y", n=[1, {"k": null}])]') == (
        [("add", {"a": 1, "b": 2}), ("say", {"text": "x, y", "n": [1, {"k": None}]})], [], "")


def test_gemma3_reads_commas_and_spaces_too():
    assert calls("gemma3_pythonic", "[ add( a = 1 , b=2 ) ]")[0] == [("add", {"a": 1, "b": 2})]
    assert calls("gemma3_pythonic", "[ping()]")[0] == [("ping", {})]


def test_gemma3_text_is_content():
    assert calls("gemma3_pythonic", "The answer is [7].") == ([], [], "The answer is [7].")
    assert calls("gemma3_pythonic", "  hello  ") == ([], [], "hello")


@pytest.mark.parametrize("text, said", [
    ("[add(a=1b=", "invalid JSON value"), ("[add(a=x)]", "invalid JSON value"),
    ("[add(1, 2)]", "expected KEY=VALUE"), ("[add(a=1)", "expected ',' or ']'"), ("[add(a=1), 7]", "expected NAME("),
])
def test_gemma3_malformed_calls_are_error_lines_that_show_the_format(text, said):
    found, errors, _ = calls("gemma3_pythonic", text)
    assert len(errors) == 1 and said in errors[0] and "format: [NAME(KEY=JSON" in errors[0], errors


def test_gemma3_never_evaluates_what_the_model_wrote():
    # a value is JSON, never Python: an expression is an error, not a call with its result
    found, errors, _ = calls("gemma3_pythonic", '[add(a=__import__("os").getcwd())]')
    assert found == [] and "invalid JSON value" in errors[0]


# --- llama4_pythonic -----------------------------------------------------------------------------

def test_llama4_pythonic_reads_quoted_values_back_as_the_values_they_spell():
    # Llama-4's pythonic template writes every value as "%s": 1 -> "1", True -> "True", [1] -> "[1]"
    text = '[add(a="1", b="2.5"), f(ok="True", none="None", xs="[1, 2]", d="{\'k\': \'v\'}", s="New York")]'
    assert calls("llama4_pythonic", text)[0] == [
        ("add", {"a": 1, "b": 2.5}),
        ("f", {"ok": True, "none": None, "xs": [1, 2], "d": {"k": "v"}, "s": "New York"})]


def test_llama4_pythonic_a_value_may_hold_quotes_commas_and_parentheses():
    text = '[say(text="she said "hi", then (left)", to="bob")]'
    assert calls("llama4_pythonic", text)[0] == [("say", {"text": 'she said "hi", then (left)', "to": "bob"})]


def test_llama4_pythonic_never_evaluates_what_the_model_wrote():
    # a value is read with literal_eval (literals only); anything else stays the text it is
    found, errors, _ = calls("llama4_pythonic", '[f(x="__import__(\'os\').system(\'true\')", y="1+1", z="{1, 2}")]')
    assert found == [("f", {"x": "__import__('os').system('true')", "y": "1+1", "z": "{1, 2}"})] and not errors


@pytest.mark.parametrize("text, said", [
    ('[f(a=1)]', 'expected KEY="VALUE"'), ('[f(a="1)]', "never closed"), ('[f(a="1", b)]', "never closed"),
])
def test_llama4_pythonic_malformed_calls_are_error_lines(text, said):
    found, errors, _ = calls("llama4_pythonic", text)
    assert found == [] and said in errors[0] and 'format: [NAME(KEY="VALUE"' in errors[0], errors


def test_llama4_pythonic_a_huge_number_stays_text():
    big = "9" * 5000  # int() refuses more than 4,300 digits
    assert calls("llama4_pythonic", f'[f(n="{big}")]')[0] == [("f", {"n": big})]


# --- llama4 (Meta's own template) ----------------------------------------------------------------

def test_llama4_reads_the_python_block_and_the_json_calls_after_it():
    text = ('<|python_start|>Let me add.<|python_end|>{"name": "add", "parameters": {"a": 1, "b": 2}}'
            '{"name": "mul", "parameters": {"x": 3}}')
    assert calls("llama4", text) == ([("add", {"a": 1, "b": 2}), ("mul", {"x": 3})], [], "Let me add.")
    assert calls("llama4", '<|python_start|><|python_end|>{"name": "ping"}') == ([("ping", {})], [], "")


def test_llama4_text_without_a_python_block_is_content():
    assert calls("llama4", 'It is {"name": "x"}.') == ([], [], 'It is {"name": "x"}.')


@pytest.mark.parametrize("text, said", [
    ("<|python_start|>x", "never closed"), ("<|python_start|><|python_end|>hello", "no call after"),
    ('<|python_start|><|python_end|>{"name": "a", "parameters": {', "invalid JSON"),
    ('<|python_start|><|python_end|>{"parameters": {}}', 'missing "name"'),
])
def test_llama4_malformed_calls_are_error_lines(text, said):
    found, errors, _ = calls("llama4", text)
    assert found == [] and said in errors[0], errors


def test_llama4_markers_inside_a_json_string_do_not_end_the_call():
    text = '<|python_start|><|python_end|>{"name": "echo", "parameters": {"s": "<|python_end|>}{\\"name\\": \\"rm\\"}"}}'
    assert calls("llama4", text)[0] == [("echo", {"s": '<|python_end|>}{"name": "rm"}'})]


# --- xlam and internlm2 --------------------------------------------------------------------------

def test_xlam_reads_a_json_list_of_calls():
    assert calls("xlam", '[{"name": "add", "arguments": {"a": 1}}, {"name": "ping"}]') == (
        [("add", {"a": 1}), ("ping", {})], [], "")
    assert calls("xlam", "[1, 2] is a list") == ([], [], "[1, 2] is a list")
    assert "invalid JSON" in calls("xlam", '[{"name": "add", ')[1][0]


def test_internlm2_reads_action_blocks():
    text = 'Sure.<|action_start|><|plugin|>\n{"name": "add", "arguments": {"a": 1}}<|action_end|>'
    assert calls("internlm2", text) == ([("add", {"a": 1})], [], "Sure.")
    assert "never closed" in calls("internlm2", "<|action_start|><|plugin|>{}")[1][0]


def test_granite_20b_fc_reads_each_function_call():
    text = 'Sure.<function_call> {"name": "add", "arguments": {"a": 1}}\n<function_call> {"name": "ping"}'
    assert calls("granite_20b_fc", text) == ([("add", {"a": 1}), ("ping", {})], [], "Sure.")
    assert "invalid JSON" in calls("granite_20b_fc", "<function_call> {nope")[1][0]


def test_granite_reads_the_json_list_after_its_tool_call_token():
    # vLLM's granite parser: <|tool_call|> then a JSON list of {"name", "arguments"}
    text = 'Sure.<|tool_call|>[\n    {\n        "name": "add",\n        "arguments": {"a": 1}\n    },\n    {"name": "ping"}\n]'
    assert calls("granite", text) == ([("add", {"a": 1}), ("ping", {})], [], "Sure.")
    assert calls("granite", "The answer is 7.") == ([], [], "The answer is 7.")
    assert "invalid JSON" in calls("granite", "<|tool_call|>[{nope")[1][0]
    assert parse_auto('<|tool_call|>[{"name": "add", "arguments": {"a": 1}}]').calls == [ToolCall("add", {"a": 1})]


def test_phi4_mini_reads_the_calls_its_template_renders_and_the_ones_it_asks_for():
    # its template asks for functools[...] but renders earlier calls as JSON objects, one per line
    text = '{"name": "add", "arguments": {"a": 1}},\n{"name": "ping", "arguments": {}}'
    assert calls("phi4_mini", text) == ([("add", {"a": 1}), ("ping", {})], [], "")
    assert calls("phi4_mini", 'functools[{"name": "add", "arguments": {"a": 1}}]')[:2] == ([("add", {"a": 1})], [])
    assert calls("phi4_mini", "The answer is 7.") == ([], [], "The answer is 7.")
    # arguments held as a dict render as Python's repr: read as a literal (ast.literal_eval), never run
    assert calls("phi4_mini", '{"name": "add", "arguments": {\'a\': 1, \'ok\': True, \'n\': None}}')[:2] == (
        [("add", {"a": 1, "ok": True, "n": None})], [])
    assert "invalid JSON" in calls("phi4_mini", '{"name": "add", "arguments": __import__("os")}')[1][0]


def test_atem_reads_invoke_blocks_and_drops_the_call_headers():
    text = (' to=add<|message|><atem:function_calls>\n<atem:invoke name="add">\n<atem:parameter name="a">1'
            '</atem:parameter>\n<atem:parameter name="s">two words</atem:parameter>\n</atem:invoke>\n</atem:function_calls>')
    assert calls("atem", text) == ([("add", {"a": 1, "s": "two words"})], [], "")
    assert calls("atem", " to=user<|message|>The answer is 7.") == ([], [], "to=user<|message|>The answer is 7.")
    assert "no name=" in calls("atem", "<atem:invoke><atem:parameter>1</atem:parameter></atem:invoke>")[1][0]


# --- auto and the template's parser --------------------------------------------------------------

def test_auto_reads_each_format():
    assert parse_auto("[add(a=1b=2)]").calls == [ToolCall("add", {"a": 1, "b": 2})]
    assert parse_auto("[add(a=1, b=2)]").calls == [ToolCall("add", {"a": 1, "b": 2})]  # pythonic, as before
    assert parse_auto('<|python_start|><|python_end|>{"name": "add", "parameters": {"a": 1}}').calls == [
        ToolCall("add", {"a": 1})]
    assert parse_auto('[{"name": "add", "arguments": {"a": 1}}]').calls == [ToolCall("add", {"a": 1})]
    assert parse_auto('<|action_start|><|plugin|>{"name": "add"}<|action_end|>').calls == [ToolCall("add", {})]


@pytest.mark.parametrize("source, parser", [
    ("{%- for key, val in args.items() -%}{{ key }}={{ val | tojson }}{%- endfor -%}", "gemma3_pythonic"),
    ("{{- param + '=\"' -}}{{- \"%s\" | format(v) -}}", "llama4_pythonic"),
    ("{{- '<|python_start|>' }}{{- '<|python_end|>' }}", "llama4"),
    ("{{- param + '=' -}}{{- \"%s\" | format(v) -}}", "pythonic"),
    ('Respond as [{"name": "tool_call_name", "arguments": {"arg1": "value1"}}]', "xlam"),
    ('{{- "<|action_start|><|plugin|>\\n" }}', "internlm2"),
    ("{{- '<function_call> ' + {'name': n}|tojson }}", "granite_20b_fc"),
    ("{{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' + calls|tojson(indent=4) }}", "granite"),
    ('{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments }}}', "phi4_mini"),
    # firefunction v2 asks for the same functools[ prefix, but its template renders it: not phi4_mini's
    ("  * prefix function calls with functools marker (no closing marker required)\n"
     "{%- set ns.content = ns.content + ' functools[' + tool.calls | join(', ') + ']' -%}", "firefunction"),
])
def test_the_template_names_its_parser(source, parser):
    assert parser_for_template(source) == parser


# --- hostile and ambiguous text (outside review) -------------------------------------------------

@pytest.mark.parametrize("text, args", [
    ("[f(a=1e2e_test=5)]", {"a": 1, "e2e_test": 5}),  # was {"a": 100.0, "e_test": 5}
    ("[f(a=1e2=3)]", {"a": 1, "e2": 3}),  # was an error
    ("[f(a=-2.5E10x=1)]", {"a": -2.5, "E10x": 1}),
    ("[f(a=1e2 b=3)]", {"a": 100.0, "b": 3}), ("[f(a=1e+2b=3)]", {"a": 100.0, "b": 3}), ("[f(a=1e2)]", {"a": 100.0}),
])
def test_gemma3_an_exponent_that_reads_as_the_next_key_is_the_key(text, args):
    # with no comma between arguments, `a=1e2e_test=5` is a=1, e2e_test=5 or a=100.0, e_test=5: the
    # template's tojson never writes an exponent without its sign (1e2 is 100.0), so it is the key
    assert calls("gemma3_pythonic", text)[:2] == ([("f", args)], [])


@pytest.mark.parametrize("name", ["gemma3_pythonic", "llama4_pythonic"])
def test_a_key_may_be_any_python_identifier(name):
    # both templates write the parameter's name as it is: a tool written in Python may have 城市
    text = '[f(城市="北京", _x1="y")]'
    assert calls(name, text)[:2] == ([("f", {"城市": "北京", "_x1": "y"})], [])


@pytest.mark.parametrize("word", ["0x10", "0o17", "0b11", "1_000", "+5", " 7", "7 ", "1e3", "1E+3", "(1, 2)", "{1: 2}"])
def test_llama4_pythonic_only_the_text_a_value_renders_as_reads_as_that_value(word):
    # "%s" writes 16 as "16", never "0x10": a value that is not the "%s" of a JSON value is the text
    assert calls("llama4_pythonic", f'[f(a="{word}")]')[0] == [("f", {"a": word})]


def test_auto_a_json_list_that_is_not_calls_stays_text():
    # an answer that is a JSON list of records (extraction, structured output) is no xLAM call list:
    # each item must be {"name": ..., "arguments": ...} as the template writes it (vLLM's xlam rule)
    for answer in ['[{"x": 1}, {"x": 2}]', '[{"name": "Alice", "age": 3}]', '[{"name": "a", "arguments": {}}, {"b": 1}]']:
        turn = parse_auto(answer)
        assert (turn.calls, turn.errors, turn.content) == ([], [], answer), answer
    turn = parse_auto('[{"name": "add", "arguments": [1]}]')  # a call list written wrong is still an error
    assert not turn.calls and "must be a JSON object" in turn.errors[0]


@pytest.mark.parametrize("text, call", [
    ('<tool_call>{"name": "w", "arguments": {"s": "use <function_call> tags"}}</tool_call>',
     ("w", {"s": "use <function_call> tags"})),
    ('<tool_call>{"name": "w", "arguments": {"s": "<|python_start|>x"}}</tool_call>', ("w", {"s": "<|python_start|>x"})),
    ('{"name": "w", "parameters": {"s": "<|python_start|>x"}}', ("w", {"s": "<|python_start|>x"})),
    ('[f(s="<function_call>")]', ("f", {"s": "<function_call>"})),
    ('[f(s="<|action_start|><|plugin|>"b=1)]', ("f", {"s": "<|action_start|><|plugin|>", "b": 1})),
    ('<tool_call>\n<function=w>\n<parameter=s>\n<atem:invoke name="x">\n</parameter>\n</function>\n</tool_call>',
     ("w", {"s": '<atem:invoke name="x">'})),
])
def test_auto_a_marker_inside_another_formats_argument_does_not_hide_the_call(text, call):
    # the newer formats' markers are looked for first: one written inside a string argument of a
    # hermes, llama3_json, pythonic or qwen3_coder call made that call an error, or (atem) plain text
    turn = parse_auto(text)
    assert ([(c.name, c.arguments) for c in turn.calls], turn.errors) == ([call], [])


def test_llama4_pythonic_reads_the_calls_after_the_turns_text():
    # the template writes the message's content, then the call list, then <|eot|>: a turn with
    # text before its calls was read as text, its calls dropped (the episode ended on them)
    assert calls("llama4_pythonic", 'Let me look (in [the] docs).\n[f(a="1"), g()]') == (
        [("f", {"a": 1}), ("g", {})], [], "Let me look (in [the] docs).")
    for prose in ['I called [f(a="1")] yesterday.', "So [f(a=1)]", 'Call [f(a="1")']:  # no list that reads and ends the turn
        assert calls("llama4_pythonic", prose) == ([], [], prose)
    assert calls("gemma3_pythonic", "Sure.[f(a=1)]") == ([], [], "Sure.[f(a=1)]")  # gemma-3 writes its text after


def test_atem_several_calls_leave_no_headers_in_the_content():
    # the template writes each call as its own message: `<|eom|><|start|>assistant to=NAME<|message|>`
    # between them (<|eom|> is no stop token); the content was '<|eom|> to=mul<|message|>'
    text = (' to=add<|message|><atem:function_calls>\n<atem:invoke name="add">\n<atem:parameter name="a">1'
            '</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|><|start|>assistant to=mul<|message|>'
            '<atem:function_calls>\n<atem:invoke name="mul">\n</atem:invoke>\n</atem:function_calls>')
    assert calls("atem", text) == ([("add", {"a": 1}), ("mul", {})], [], "")


def test_auto_another_reading_wins_only_when_the_marker_was_inside_its_calls():
    # a call list read loosely (gemma-3) must not turn a broken hermes call into content
    turn = parse_auto('[f(a=1)] <tool_call>{"name": "g", "arguments": {</tool_call>')
    assert not turn.calls and "invalid JSON" in turn.errors[0]


@pytest.mark.parametrize("text, found", [
    ('[run(code="print("hi")")]', [("run", {"code": 'print("hi")'})]),  # was run(code='print("hi') and an error
    ('[run(code="print(f("x", y=2))", timeout="5")]', [("run", {"code": 'print(f("x", y=2))', "timeout": 5})]),
    ('[run(code="x = g("a")\nprint(x)"), h(a="1")]', [("run", {"code": 'x = g("a")\nprint(x)'}), ("h", {"a": 1})]),
])
def test_llama4_pythonic_a_value_may_hold_code_with_quotes_and_parentheses(text, found):
    # "%s" writes text unescaped: a value's quote closes where the template's next piece follows
    # (`)` then `]`, `, NAME(` or the end; `, KEY="`), not at the first `")` or `", KEY=` of code
    assert calls("llama4_pythonic", text)[:2] == (found, [])
