"""Every tool-call parser is linear in its input (model-written text is hostile: a parser runs in the
trainer, holding the GIL). Counted, never timed: the Python lines a parser runs plus the characters
the scanning primitives of agents/parsing.py look at, on an input of n characters and on one of 2n;
the count may grow at most 2.2x. A rule test checks that no other pattern is used: a regular
expression in a parser module is one character class with one repeat, which cannot backtrack
(the old ``deepseek`` pattern took minutes on a call marker and 45 spaces)."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from re import _parser as sre_parse  # the stdlib's pattern parser (sre_parse)

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyrl.agents import formats, more_formats, parsers, parsing, pythonic_formats
from steadyrl.agents.parsers import TOOL_PARSERS

BUILT_IN = sorted(TOOL_PARSERS)
GROWTH = 2.2  # work(2n) / work(n): linear is 2, quadratic 4
SIZE = 4000  # n: the larger input has 8,000+ characters


def work(parse, text: str) -> int:
    """Python lines run by ``parse(text)``, plus the characters :func:`parsing.find` and
    :func:`parsing.run_end` scanned (from ``pos`` to what they returned)."""
    count = [0]
    find, run_end = parsing.find.__code__, parsing.run_end.__code__

    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
        elif event == "return" and frame.f_code in (find, run_end):
            loc = frame.f_locals
            stop = len(loc["text"]) if loc.get("end") is None else loc["end"]
            if frame.f_code is find:
                count[0] += (stop if arg == -1 else arg + len(loc["needle"])) - loc["pos"]
            else:
                count[0] += arg - loc["pos"]
        return local

    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local)
    try:
        parse(text)
    finally:
        sys.settrace(previous)
    return count[0]


def assert_linear(name: str, make) -> None:
    """``make(n)`` -> a text of about n characters; the work on 2n is at most GROWTH times n's."""
    small, large = make(SIZE), make(2 * SIZE)
    assert len(large) >= 8000
    a, b = work(TOOL_PARSERS[name], small), work(TOOL_PARSERS[name], large)
    assert b <= GROWTH * a + 50, f"{name}: {a} operations on {len(small)} chars, {b} on {len(large)}"


def times(unit: str):
    return lambda n: unit * -(-n // len(unit))


DS_BEGIN, DS_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
ADVERSARIAL = {  # the shapes that made the old patterns backtrack, and their neighbours
    "deepseek": [lambda n: DS_BEGIN + " " * n, lambda n: DS_BEGIN + "function" + DS_SEP + "a" + " " * n + "{",
                 times(DS_BEGIN + "a{ "), lambda n: DS_BEGIN + "a" + DS_SEP + "{" + "} " * (n // 2),
                 lambda n: DS_BEGIN + "a```json" + " " * n + "{}```" + " " * n, times(DS_BEGIN + "a{}" + DS_END)],
    "harmony": [times("to=functions.a "), lambda n: "to=functions.a" + " " * n + "<",
                times(" <|channel|>c to=functions.a<|channel|>"), lambda n: " " * n + "to=functions.a<|message|>{}",
                times("<|channel|>analysis<|message|>x"), times("<|channel|>final<|message|>x<|end|>"),
                lambda n: "to=functions." + "a" * n],
    "glm45": [lambda n: "<tool_call>a" + "<arg_key>" * (n // 9), lambda n: "<tool_call>a<arg_key>k</arg_key>" + " " * n,
              times("<tool_call>a<arg_key>k</arg_key> <arg_value>"), times("<tool_call>\n"),
              lambda n: "<tool_call>" + "a" * n + "</tool_call>"],
    "qwen3_coder": [times("<tool_call><function=a>"), lambda n: "<tool_call>" + " " * n + "<function=" + "a" * n,
                    lambda n: "<tool_call><function=a><parameter=\n" * (n // 30) + "</parameter></function></tool_call>",
                    times("<tool_call><function=a></function>    "), times("<parameter=k>v</parameter>")],
    "kimi_k2": [times("<|tool_calls_section_begin|>"), times("<|tool_calls_section_begin|><|tool_call_begin|>a "),
                lambda n: "<|tool_calls_section_begin|>" + "<|tool_call_begin|>x" * (n // 19) + "<|tool_call_end|>"],
    "mistral": [times("[TOOL_CALLS]a "), lambda n: "[TOOL_CALLS]" + " " * n + "a",
                times("[TOOL_CALLS]a[ARGS]{}"), lambda n: "[TOOL_CALLS][" + "[" * (n // 2) + "]" * (n // 2),
                times("x[TOOL_CALLS]a[CALL_ID]" + " " * 30)],
    "hermes": [times("<tool_call>"), times("</tool_call>"), times('<tool_call>{"name": "a"}</tool_call> ')],
    "llama3_json": [times('{"name": "a", "parameters": {}} ; '), lambda n: '{"name": "' + "a" * n + '"}',
                    lambda n: "{" + " " * n + '"'],
    "pythonic": [times("[a(b=1), "), lambda n: "[a(b=" + "[" * 150 + "1" + "]" * 150 + ")]" + " " * n],
    "command_r": [times("<|START_ACTION|>"), times("<|START_ACTION|>[]<|END_ACTION|><|START_RESPONSE|>")],
}
D, M3 = "<｜DSML｜", "]<]minimax[>["
ADVERSARIAL.update({  # the newer templates' formats (agents/more_formats.py)
    "dsml": [times(D + "invoke"), times(D + 'invoke name="a">' + D + "parameter "),
             lambda n: D + 'invoke name="a">' + (D + 'parameter name="k">v</｜DSML｜parameter>') * (n // 40)
             + "</｜DSML｜invoke>", lambda n: D + "invoke " + '"' * n + "></｜DSML｜invoke>"],
    "minimax": [times("<invoke"), times('<invoke name="a"><parameter name="'), lambda n: "<invoke" + " " * n + ">"],
    "minimax_m3": [times(M3 + "<tool_call>"), lambda n: M3 + "<tool_call>" + (M3 + "<a>") * (n // 15) + M3
                   + "</tool_call>"],
    "minicpm5": [times('<function name="'), times('<function name="a"><param name="k">')],
    "seed_oss": [times("<seed:tool_call><function=a>"), times("<seed:tool_call>" + " " * 20)],
    "hy3": [times("<tool_call:opensource>"), lambda n: "<tool_call:opensource>a<tool_sep:opensource>"
            + "<arg_key:opensource>" * (n // 20) + "</tool_call:opensource>"],
    "kimi_k3": [times('<|open|>call tool="a"<|sep|>'), lambda n: '<|open|>call tool="a"<|sep|>'
                + "<|open|>argument" * (n // 16) + "<|close|>call<|sep|>", times("<|open|>call<|open|>json")],
    "solar": [times("<|tool_call:begin|>"), times("<|tool_call:begin|><|tool_call:name|>a<|tool_call:end|>")],
    "json_tagged": [times("<tool_calls>"), times("<tool_calls>{} </tool_calls>"), times("<|function_call|>{}"),
                    lambda n: "<TOOLCALL>" + "[" * n + "</TOOLCALL>"],
    "apertus": [times("<|tools_prefix|>"), times('<|tools_prefix|>[{"a": {}}]<|tools_suffix|>')],
    "lfm2": [times("<|tool_call_start|>"), times("<|tool_call_start|>[a(b=1)]<|tool_call_end|>")],
    "functionary_v31": [times("<function="), times("<function=a>{}</function> ")],
    "functionary_v32": [times(">>>"), times(">>>a\n{} "), times(">>>all\nx"), lambda n: ">>>a" + "b" * n],
    "firefunction": [times("functools["), lambda n: "functools" + " " * n + "["],
    "command_r_plus": [times("Action:```json"), lambda n: "Action:" + " " * n + "```json" + " " * n],
    "gemma4": [times("<|tool_call>call:"), lambda n: "<|tool_call>call:a{" + "k:" * (n // 2) + "}<tool_call|>",
               lambda n: "<|tool_call>call:a{k:" + '<|"|>' * (n // 5) + "}<tool_call|>",
               lambda n: "<|tool_call>call:a{k:" + " " * n + "1}<tool_call|>", times("<|tool_call>call:a{[,:}<tool_call|>")],
})
ADVERSARIAL.update({  # gemma-3 / Llama-4 call formats (agents/pythonic_formats.py)
    "gemma3_pythonic": [times("[a(b=1 "), lambda n: "[a(" + "b=1" * (n // 3) + ")]", times("[a(b=1c=2), "),
                        lambda n: "[a(b=" + "[" * 150 + "1" + "]" * 150 + ")]" + " " * n,
                        lambda n: "[a(b=" + " " * n + "1)]", lambda n: "[" + "a" * n + "(",
                        lambda n: "[a(b=1e2" + "e" * n, lambda n: "[a(b=" + "1e2e=" * (n // 5 + 1)],
    "llama4_pythonic": [times('[a(b="'), lambda n: '[a(b="' + '" x' * (n // 3) + '")]', times('[a(b="1", c="2"), '),
                        lambda n: '[a(b="' + '", ' * (n // 3) + ")]", lambda n: '[a(b="' + '"' + " " * n + ",",
                        lambda n: '[a(b="' + times('"  , ' + "k" * 20)(n) + ")]", lambda n: "x" + "[a [ " * (n // 5 + 1),
                        lambda n: "x" + '[a(b="' * (n // 6 + 1), lambda n: "x[" + " " * n + "a" * n + "]",
                        lambda n: '[a(b="' + times('")  ,  ' + "k" * 20 + " ")(n), lambda n: '[a(b="' + times('", k=1 ')(n)],
    "llama4": [times("<|python_start|>"), times("<|python_start|><|python_end|>{} "),
               lambda n: "<|python_start|><|python_end|>" + times('{"name": "a", "parameters": {}};')(n),
               lambda n: "<|python_start|>" + " " * n + "<|python_end|>" + " " * n + "{"],
    "xlam": [lambda n: "[" + " " * n + "{", lambda n: "[{" + "[" * n, times('[{"name": "a"}, ')],
    "internlm2": [times("<|action_start|><|plugin|>"), times("<|action_start|><|plugin|>{}<|action_end|> ")],
    "granite_20b_fc": [times("<function_call>"), times('<function_call> {"name": "a"} x'),
                       lambda n: "<function_call>" + " " * n + "{"],
    "granite": [times("<|tool_call|>"), lambda n: "<|tool_call|>" + " " * n + "[", lambda n: "<|tool_call|>" + "[" * n,
                times('<|tool_call|>[{"name": "a"}] x')],
    "phi4_mini": [times('{"name": "a"}, '), lambda n: '{"' + "[" * n, lambda n: '{"name": "a", "arguments": {' + "'a': 1, " * (n // 8) + "}",
                  lambda n: '{"name": "a", "arguments": ' + "(" * 150 + ")" * 150 + "}" + " " * n, times("functools[")],
    "atem": [times("<atem:invoke"), times('<atem:invoke name="a"><atem:parameter name="'),
             lambda n: "to=" * n + "<|message|>", times('to=a<|message|><atem:invoke name="a"></atem:invoke> ')],
})
ADVERSARIAL["auto"] = [make for makes in ADVERSARIAL.values() for make in makes]


CASES = [(name, i) for name in BUILT_IN for i in range(len(ADVERSARIAL.get(name, [])))]


def test_every_built_in_parser_has_adversarial_inputs():
    assert {name for name, _ in CASES} == set(BUILT_IN)


@pytest.mark.parametrize("name, i", CASES)
def test_a_parser_does_linear_work_on_adversarial_input(name, i):
    assert_linear(name, ADVERSARIAL[name][i])


MARKERS = ["<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>", ">", "<",
           "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<|tool_calls_section_begin|>",
           "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
           "to=functions.", "<|channel|>", "<|constrain|>", "<|message|>", "<|call|>", "<|end|>", "<|start|>assistant",
           "final", "analysis", DS_BEGIN, DS_END, DS_SEP, "<｜tool▁calls▁begin｜>", "```json", "```", "function",
           "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|START_ACTION|>", "<|END_ACTION|>", "<|python_tag|>",
           '{"name": "a", "arguments": {}}', "{", "}", "[", "]", "(", ")", "a", "=", ";", ":", '"', " ", "  ", "\n",
           "<｜DSML｜invoke", "</｜DSML｜invoke>", "<｜DSML｜parameter", "</｜DSML｜parameter>", ' name="', ' string="',
           "<invoke", "</invoke>", "<parameter", "]<]minimax[>[", "<function name=", "<param", "</param>",
           "<seed:tool_call>", "</seed:tool_call>", "<tool_call:opensource>", "<tool_sep:opensource>",
           "<|open|>call", "<|close|>call<|sep|>", "<|sep|>", "<|open|>argument", "<|close|>argument", ' tool="',
           "<|tool_call:begin|>", "<|tool_call:name|>", "<|tool_call:args|>", "<|tool_call:end|>", "<tool_calls>",
           "</tool_calls>", "<TOOLCALL>", "<|function_call|>", "<|tools_prefix|>", "<|tools_suffix|>",
           "<|tool_call>call:", "<tool_call|>", '<|"|>', "<|tool_call_start|>", "<|tool_call_end|>", ">>>", ">>>all\n", "functools", "Action:", "Action:\n```json",
           "<|python_start|>", "<|python_end|>", "b=", '="', '", ', "k=1 ", "<|action_start|><|plugin|>", "<|action_end|>", "<function_call>", "<|tool_call|>",
           "<atem:invoke", "</atem:invoke>", "<atem:parameter", "</atem:parameter>", "to=", "<|message|>"]


@given(unit=st.lists(st.sampled_from(MARKERS), min_size=1, max_size=8).map("".join),
       name=st.sampled_from(BUILT_IN))
def test_a_parser_does_linear_work_on_any_repeated_mix_of_its_markers(unit, name):
    assert_linear(name, times(unit))


# --- the rule: no pattern that can backtrack ---------------------------------------------------

ONE_CHAR = {sre_parse.IN, sre_parse.ANY, sre_parse.LITERAL, sre_parse.NOT_LITERAL, sre_parse.CATEGORY}


def _is_one_class_run(pattern: str) -> bool:
    """``pattern`` is one character (class) with one repeat, or a fixed run of characters."""
    items = list(sre_parse.parse(pattern))
    repeats = [(op, av) for op, av in items if op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT)]
    if any(op not in ONE_CHAR for op, _ in items if op not in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT)):
        return False
    return len(repeats) <= 1 and all(len(av[2]) == 1 and av[2][0][0] in ONE_CHAR for _, av in repeats)


def patterns_in(module) -> list[str]:
    """Every pattern string given to a ``re`` function in ``module``'s source."""
    found = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"):
            assert node.args and isinstance(node.args[0], ast.Constant), ast.unparse(node)
            found.append(node.args[0].value)
    return found


@pytest.mark.parametrize("module", [parsers, formats, more_formats, pythonic_formats, parsing], ids=lambda m: m.__name__)
def test_the_parser_modules_use_no_pattern_that_can_backtrack(module):
    bad = [p for p in patterns_in(module) if not _is_one_class_run(p)]
    assert bad == [], f"{module.__name__}: patterns with more than one repeat or a repeat of a group: {bad}"


def test_the_rule_refuses_the_patterns_that_backtracked():
    for pattern in [r"<x>(?:function<s>)?([^<\n]+?)\s*(?:<s>)?\s*(?:```json\s*)?(\{.*?\})\s*(?:```\s*)?<e>",
                    r"\s*;\s*", r"(a+)+", r"<x>(.*?)</x>"]:
        assert not _is_one_class_run(pattern), pattern
    for pattern in [r"\s*", r"[^<\n]*", r"[\w.\-]*", r"\w", r"[A-Za-z0-9]*"]:
        assert _is_one_class_run(pattern), pattern


def test_the_old_deepseek_input_is_one_call_error_not_a_stall():
    turn = TOOL_PARSERS["deepseek"](DS_BEGIN + "add" + " " * 8000 + "{")
    assert turn.calls == [] and "never closed" in turn.errors[0]
    assert TOOL_PARSERS["auto"](DS_BEGIN + " " * 8000).errors


def test_pattern_rule_sees_the_patterns_in_source():
    assert r"[\w.\-]*" in patterns_in(formats)
    assert re.compile(r"[\w.\-]*").match("a.b-c d").end() == 5
