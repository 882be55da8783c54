"""The newer templates' tool-call formats (agents/more_formats.py): each read back from the text
its real template renders for a call (round trip, with the templates of the llama-cpp-python sdist
when they can be fetched, and with the same texts written here), `auto` finds them by their
markers (none of them is read as a final answer, nor MiniMax-M3's as hermes)."""

from __future__ import annotations

import json

import pytest

from steadyrl.agents.formats import parser_for_template
from steadyrl.agents.parsers import TOOL_PARSERS, ToolCall

ADD = ("add", {"a": 1, "b": "x y"})
D = "<｜DSML｜"
M3 = "]<]minimax[>["

TEXTS = {  # as each template renders the call add(a=1, b="x y")
    "dsml": (f'{D}function_calls>\n{D}invoke name="add">\n{D}parameter name="a" string="false">1</｜DSML｜parameter>\n'
             f'{D}parameter name="b" string="true">x y</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
    "minimax": ('<minimax:tool_call>\n<invoke name="add">\n<parameter name="a">1</parameter>\n'
                '<parameter name="b">x y</parameter>\n</invoke>\n</minimax:tool_call>'),
    "minimax_m3": (f'{M3}<tool_call>\n{M3}<invoke name="add">{M3}<a>1{M3}</a>{M3}<b>x y{M3}</b>{M3}</invoke>\n'
                   f'{M3}</tool_call>'),
    "minicpm5": '<function name="add"><param name="a">1</param><param name="b">x y</param></function>',
    "seed_oss": ("<seed:tool_call>\n<function=add>\n<parameter=a>1</parameter>\n<parameter=b>x y</parameter>\n"
                 "</function>\n</seed:tool_call>"),
    "hy3": ("<tool_calls:opensource>\n<tool_call:opensource>add<tool_sep:opensource>\n<arg_key:opensource>a"
            "</arg_key:opensource>\n<arg_value:opensource>1</arg_value:opensource>\n<arg_key:opensource>b"
            "</arg_key:opensource>\n<arg_value:opensource>x y</arg_value:opensource>\n</tool_call:opensource>\n"
            "</tool_calls:opensource>"),
    "kimi_k3": ('<|open|>tools<|sep|><|open|>call tool="add" index="1"<|sep|><|open|>argument key="a" type="number"'
                '<|sep|>1<|close|>argument<|sep|><|open|>argument key="b" type="string"<|sep|>x y<|close|>argument'
                "<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"),
    "solar": ('<|tool_calls|><|tool_call:begin|>call00000<|tool_call:name|>add<|tool_call:args|>{"a": 1, "b": "x y"}'
              "<|tool_call:end|>"),
    "apertus": '<|tools_prefix|>[{"add": {"a": 1, "b": "x y"}}]<|tools_suffix|>',
    "lfm2": '<|tool_call_start|>[add(a=1, b="x y")]<|tool_call_end|>',  # its templates render no calls
    "gemma4": '<|tool_call>call:add{a:1,b:<|"|>x y<|"|>}<tool_call|>',
    "functionary_v31": '<function=add>{"a": 1, "b": "x y"}</function>',
}
JSON_TAGGED = {  # Apriel, MiniMax-M1 (an object a line), Nemotron-Nano-v2, GigaChat-3.1
    "apriel": '<tool_calls>[{"name": "add", "arguments": {"a": 1, "b": "x y"}, "id": "call00000"}]</tool_calls>',
    "minimax_m1": '<tool_calls>\n{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": \\"x y\\"}"}\n</tool_calls>',
    "nemotron_v2": '<TOOLCALL>[{"name": "add", "arguments": {"a": 1, "b": "x y"}}]</TOOLCALL>',
    "gigachat": '<|function_call|>{"name": "add", "arguments": {"a": 1, "b": "x y"}}',
}


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_each_new_format_reads_back_its_call_and_auto_finds_it(name):
    for parser in (name, "auto"):
        turn = TOOL_PARSERS[parser]("Let me add. " + TEXTS[name])
        assert [(c.name, c.arguments) for c in turn.calls] == [ADD] and turn.errors == [], parser
        assert turn.content == "Let me add.", parser


@pytest.mark.parametrize("model", sorted(JSON_TAGGED))
def test_json_between_markers_is_read_for_each_model(model):
    for parser in ("json_tagged", "auto"):
        turn = TOOL_PARSERS[parser](JSON_TAGGED[model])
        assert [(c.name, c.arguments) for c in turn.calls] == [ADD] and turn.errors == []


def test_ids_the_model_wrote_are_kept():
    assert TOOL_PARSERS["solar"](TEXTS["solar"]).calls[0].id == "call00000"
    assert TOOL_PARSERS["json_tagged"](JSON_TAGGED["apriel"]).calls[0].id == "call00000"


def test_kimi_k3_reads_arguments_given_as_one_json_object():
    text = ('<|open|>call tool="add" index="1"<|sep|><|open|>json type="object"<|sep|>{"a": 1, "b": "x y"}'
            "<|close|>json<|sep|><|close|>call<|sep|>")
    assert TOOL_PARSERS["kimi_k3"](text).calls == [ToolCall(*ADD)]


def test_gemma4_reads_nested_values_text_with_separators_and_none():
    text = '<|tool_call>call:f{x:{y:[1,true,None,<|"|>a,b:c<|"|>]},z:-2.5,w:hello world}<tool_call|>'
    assert TOOL_PARSERS["gemma4"](text).calls == [ToolCall("f", {"x": {"y": [1, True, None, "a,b:c"]}, "z": -2.5,
                                                                 "w": "hello world"})]
    assert "never closed" in TOOL_PARSERS["gemma4"]('<|tool_call>call:f{x:<|"|>open}<tool_call|>').errors[0]


def test_functionary_v32_reads_segments_after_the_generation_prompts_marker():
    turn = TOOL_PARSERS["functionary_v32"]('all\nLet me add.>>>add\n{"a": 1, "b": "x y"}')
    assert turn.calls == [ToolCall(*ADD)] and turn.content == "Let me add."
    assert TOOL_PARSERS["functionary_v32"]("all\nThe answer is 3. >>> x").content == "The answer is 3. >>> x"


def test_minimax_m3_is_not_read_as_hermes():
    turn = TOOL_PARSERS["auto"](TEXTS["minimax_m3"])
    assert turn.calls == [ToolCall(*ADD)] and not any("invalid JSON" in e for e in turn.errors)


@pytest.mark.parametrize("name, text, says", [
    ("dsml", f'{D}invoke name="add">{D}parameter name="a" string="false">1', "never closed"),
    ("minimax", "<invoke>\n</invoke>", "no name="),
    ("solar", "<|tool_call:begin|>x<|tool_call:end|>", "<|tool_call:args|>"),
    ("json_tagged", "<tool_calls>[{]</tool_calls>", "invalid JSON"),
    ("kimi_k3", '<|open|>call index="1"<|sep|><|close|>call<|sep|>', 'tool="'),
])
def test_a_malformed_call_is_one_error_line_with_the_format(name, text, says):
    turn = TOOL_PARSERS[name](text)
    assert turn.calls == [] and len(turn.errors) == 1
    assert says in turn.errors[0] and "format:" in turn.errors[0]


@pytest.mark.parametrize("name, text", [
    ("firefunction", 'I will add. functools[{"name": "add", "arguments": {"a": 1, "b": "x y"}}]'),
    ("command_r_plus", 'I will add.\nAction:\n```json\n[\n    {\n        "tool_name": "add",\n        "parameters": '
                       '{"a": 1, "b": "x y"}\n    }\n]\n```'),
])
def test_json_lists_after_a_marker_are_read(name, text):
    for parser in (name, "auto"):
        turn = TOOL_PARSERS[parser](text)
        assert turn.calls == [ToolCall(*ADD)] and turn.content == "I will add.", parser


def test_plain_text_is_content_in_every_new_format():
    for name in [*TEXTS, "json_tagged", "functionary_v32", "firefunction", "command_r_plus"]:
        turn = TOOL_PARSERS[name]("The answer is 9. >>> functools.reduce(Action:)")
        assert (turn.content, turn.calls, turn.errors) == ("The answer is 9. >>> functools.reduce(Action:)", [], []), name


# --- round trip through the real templates -----------------------------------------------------

ROUND_TRIP = {  # template file -> the parser its call reads back with (and that auto picks for it)
    "deepseek-ai-DeepSeek-V3.2.jinja": "dsml", "deepseek-ai-DeepSeek-V4.jinja": "dsml",
    "MiniMax-M1.jinja": "json_tagged", "MiniMax-M2.jinja": "minimax", "MiniMax-M3.jinja": "minimax_m3",
    "openbmb-MiniCPM5-1B.jinja": "minicpm5", "ByteDance-Seed-OSS.jinja": "seed_oss", "tencent-Hy3.jinja": "hy3",
    "Kimi-K3.jinja": "kimi_k3", "upstage-Solar-Open-100B.jinja": "solar", "unsloth-Apriel-1.5.jinja": "json_tagged",
    "Apriel-1.6-15b-Thinker-fixed.jinja": "json_tagged", "GigaChat3.1-10B-A1.8B.jinja": "json_tagged",
    "Apertus-8B-Instruct.jinja": "apertus", "google-gemma-4-31B-it.jinja": "gemma4",
    "google-gemma-4-31B-it-interleaved.jinja": "gemma4", "meetkai-functionary-medium-v3.1.jinja": "functionary_v31",
    "meetkai-functionary-medium-v3.2.jinja": "functionary_v32",  # no marker: its parser only, not auto
}
def test_the_template_of_a_format_read_only_by_its_markers_names_its_parser(templates):
    assert parser_for_template((templates / "LFM2-8B-A1B.jinja").read_text()) == "lfm2"
    assert parser_for_template((templates / "CohereForAI-c4ai-command-r-plus-tool_use.jinja").read_text()) == "command_r_plus"
    assert parser_for_template((templates / "fireworks-ai-llama-3-firefunction-v2.jinja").read_text()) == "firefunction"


@pytest.fixture(scope="module")
def templates():
    from support_realtemplates import TemplatesUnavailable, template_dir

    try:
        return template_dir()
    except TemplatesUnavailable as err:
        pytest.skip(f"the real chat templates cannot be fetched: {err}")


def rendered_call(source: str) -> str:
    """What a template renders after the user's message for the assistant's call add(a=1, b="x y")
    and its result (arguments as an object, or as OpenAI's string where the template wants that):
    the assistant's header, the call, the result; the parsers read the call out of it."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    template = _compile_jinja_template(source)
    tools = [{"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}}}]
    user = {"role": "user", "content": "What is 1+2?"}
    before = template.render(messages=[user], tools=tools, add_generation_prompt=False, bos_token="", eos_token="")
    for arguments in (dict(ADD[1]), json.dumps(ADD[1])):
        call = {"id": "call00000", "type": "function", "function": {"name": "add", "arguments": arguments}}
        result = {"role": "tool", "content": "3", "tool_call_id": "call00000", "name": "add"}
        try:
            whole = template.render(messages=[user, {"role": "assistant", "content": "", "tool_calls": [call]},
                                              result], tools=tools, add_generation_prompt=False, bos_token="",
                                    eos_token="")
        except Exception:  # noqa: BLE001 - this template wants the other form of arguments
            continue
        assert whole.startswith(before)
        return whole[len(before):]
    raise AssertionError("the template renders no call")


@pytest.mark.parametrize("file", sorted(ROUND_TRIP))
def test_the_call_a_real_template_renders_reads_back(templates, file):
    source = (templates / file).read_text()
    text = rendered_call(source)
    name = ROUND_TRIP[file]
    assert parser_for_template(source) == name
    text = text.split("<|eot_id|>")[0] if name == "functionary_v32" else text  # the turn ends at its end token
    for parser in (name, "auto") if name != "functionary_v32" else (name,):
        turn = TOOL_PARSERS[parser](text)
        assert [(c.name, c.arguments) for c in turn.calls] == [ADD], (parser, text)


