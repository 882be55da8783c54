"""Tool-call parsers for the call formats published templates render that no other parser reads back
(issue 41, item 5): each a linear scan with the primitives of :mod:`.parsing`, as in :mod:`.formats`.

==================  =====================================================================
name                a call as the template renders it (and so as the model trained on it writes it)
==================  =====================================================================
``gemma3_pythonic`` gemma-3's pythonic tool template (vLLM's ``tool_chat_template_gemma3_pythonic``):
                    ``[add(a=1b=2), mul(x="y")]``: each value is JSON (the template's ``tojson``), and
                    the template writes no comma between arguments (its ``first`` flag is reset inside
                    the loop, where Jinja does not keep it), so commas are optional
``llama4_pythonic`` Llama-4's pythonic template: ``TEXT[add(a="1", b="2")]``: every value is the text
                    Python's ``"%s"`` makes of it, between double quotes, unescaped; the list ends
                    the turn, after its text (only the first ``[NAME(`` after the text is tried)
``llama4``          Llama-4's own template (Meta's, as trainers ship it):
                    ``<|python_start|>TEXT<|python_end|>{"name": "add", "parameters": {...}}{...}``,
                    the turn's text inside the python block, the calls JSON objects after it
``xlam``            xLAM: the turn is ``[{"name": "add", "arguments": {...}}, ...]``
``internlm2``       InternLM2: ``<|action_start|><|plugin|>\n{"name": "add", "arguments": {...}}<|action_end|>``
``granite_20b_fc``  granite-20b-functioncalling: ``<function_call> {"name": "add", "arguments": {...}}`` per call
``granite``         Granite-3 (vLLM's granite tool template): ``<|tool_call|>[{"name": "add", "arguments": {...}}, ...]``
``phi4_mini``       Phi-4-mini (vLLM's template): ``functools[{...}, ...]`` as it asks, or ``{"name": "add", "arguments": {...}},
                    {...}`` as it renders earlier calls
``atem``            Muse Glimmer: `` to=add<|message|><atem:function_calls><atem:invoke name="add"><atem:parameter
                    name="a">1</atem:parameter></atem:invoke></atem:function_calls>``
==================  =====================================================================

Llama-3.2's pythonic template (and ToolACE's) renders ``[add(a=1, b=2)]``: ``pythonic`` reads it.

``llama4_pythonic``'s values carry no type: the template renders ``1`` and ``"1"`` alike. A value
is read as the JSON value (not text) whose ``"%s"`` text it is when there is one (a number,
``True`` / ``False`` / ``None``, a list or dict in Python's spelling), else as the text: so the
call the template rendered from ``{"a": 1}`` reads back as ``{"a": 1}``, and a text argument that
reads as a number (``"1"``) reads back as the number; ``"0x10"``, ``"1_000"``, ``" 7"`` or
``"(1, 2)"`` are the ``"%s"`` of no JSON value (16 renders as ``16``) and stay text. A value's
closing quote is the first ``"`` followed by what the template writes next: ``, KEY="``, or ``)``
then ``]``, ``, NAME(`` or the end; so code such as ``print("hi")`` or ``f("x", y=2)`` is one value,
and a value holding ``", b="``, ``")]`` or ``"), g(`` is read short.
"""

from __future__ import annotations

import ast
import json
import re

from .parser_base import ParsedTurn, ToolCall, decode_call, parsed_turn, clip_text, to_call, register_parser
from .parsing import decode_error, find, run_end, skip_ws

__all__ = ["parse_gemma3_pythonic", "parse_llama4_pythonic", "parse_llama4", "parse_xlam", "parse_internlm2",
           "parse_granite_20b_fc", "parse_granite", "parse_phi4_mini", "parse_atem"]

_DECODER = json.JSONDecoder()
_IDENT_HEAD = re.compile(r"[A-Za-z_]")
_KEY_HEAD = re.compile(r"[^\W\d]")  # a Python identifier's first character: a key may be 城市
_DOTTED = re.compile(r"[\w.]*")
_WORD = re.compile(r"\w*")

GEMMA3_FORMAT = "[NAME(KEY=JSON KEY=JSON ...), ...] (commas between arguments optional)"
LLAMA4_PYTHONIC_FORMAT = '[NAME(KEY="VALUE", KEY="VALUE"), ...]'
LLAMA4_FORMAT = '<|python_start|>TEXT<|python_end|>{"name": NAME, "parameters": {...}}...'


def _name_at(text: str, at: int) -> int:
    """The end of the (dotted) identifier at ``at``; ``at`` itself when there is none."""
    if not _IDENT_HEAD.match(text, at):
        return at
    return run_end(text, at + 1, _DOTTED)


def _key_at(text: str, at: int) -> tuple[str, int] | None:
    """``(key, index after "=")`` of ``KEY \\s* = \\s*`` at ``at`` (KEY a Python identifier), or None."""
    if not _KEY_HEAD.match(text, at):
        return None
    end = run_end(text, at + 1, _WORD)
    eq = skip_ws(text, end)
    return (text[at:end], skip_ws(text, eq + 1)) if text.startswith("=", eq) else None


def _list_at(body: str, pos: int) -> bool:
    """``[ NAME(`` starts at ``pos``."""
    at = skip_ws(body, pos + 1) if body.startswith("[", pos) else -1
    return at != -1 and _name_at(body, at) > at and body.startswith("(", _name_at(body, at))


def _list_after_text(body: str) -> int:
    """Where the first ``[ NAME(`` after the start of ``body`` is (-1: none); linear: each ``[`` once."""
    at = find(body, "[", 1)
    while at != -1 and not _list_at(body, at):
        at = find(body, "[", at + 1)
    return at


def _call_list(text: str, read_args, fmt: str, after_text: bool = False) -> ParsedTurn:
    """``[NAME(ARGS), NAME(ARGS), ...]`` at the start of the turn; ``read_args(text, pos)`` reads one
    call's arguments from just after its ``(`` -> ``(dict, index after ")")`` or an error line. A
    turn that does not start as ``[NAME(`` is text (content, no call); text after the list is content.
    ``after_text`` (Llama-4, whose template writes the content, then the list): else, the first
    ``[NAME(`` after the text is the list when it reads without error and ends the turn."""
    body = text.strip()
    if not _list_at(body, 0):
        start = _list_after_text(body) if after_text else -1
        turn = _call_list(body[start:], read_args, fmt) if start != -1 else None
        if turn is None or turn.errors or turn.content:
            return ParsedTurn(content=body)
        return ParsedTurn(body[:start].strip(), turn.calls)
    at = skip_ws(body, 1)
    results = []
    while True:
        name_end = _name_at(body, at)
        where = f"tool call {len(results) + 1}"
        if name_end == at or not body.startswith("(", name_end):
            results.append(f"{where}: expected NAME( at {clip_text(body[at:])!r}; format: {fmt}")
            return parsed_turn("", results)
        read = read_args(body, name_end + 1)
        if isinstance(read, str):
            results.append(f"{where} ({body[at:name_end]}): {read}; format: {fmt}")
            return parsed_turn("", results)
        args, after = read
        results.append(to_call({"name": body[at:name_end], "arguments": args}, where, ("arguments",), fmt))
        at = skip_ws(body, after)
        if body.startswith("]", at):
            return parsed_turn(body[at + 1:], results)
        if not body.startswith(",", at):
            results.append(f"after {where}: expected ',' or ']' at {clip_text(body[at:])!r}; format: {fmt}")
            return parsed_turn("", results)
        at = skip_ws(body, at + 1)


def _exponent_as_key(text: str, start: int, end: int, value):
    """``(value, end)`` of the number ``text[start:end]`` whose exponent is the next key's start:
    with no comma between arguments ``a=1e2e_x=5`` reads as ``a=1, e2e_x=5``, not ``a=100.0, e_x=5``
    (tojson writes no unsigned exponent: 100.0 is ``100.0``, 1e100 ``1e+100``)."""
    if not isinstance(value, float) or text[start] not in "-0123456789":
        return value, end
    cut = max(text.rfind("e", start, end), text.rfind("E", start, end))
    if cut == -1 or _key_at(text, cut) is None:
        return value, end
    return json.loads(text[start:cut]), cut


def _gemma3_args(text: str, pos: int):
    """``(KEY=JSON ,?)* )`` from ``pos``: ``(arguments, index after ")")`` or an error line."""
    args = {}
    while True:
        at = skip_ws(text, pos)
        if text.startswith(")", at):
            return args, at + 1
        key = _key_at(text, at)
        if key is None:
            return f"expected KEY=VALUE or ')' at {clip_text(text[at:])!r}"
        try:
            value, end = _DECODER.raw_decode(text, key[1])
            value, end = _exponent_as_key(text, key[1], end, value)
        except (ValueError, RecursionError) as err:
            return f"argument {key[0]!r}: invalid JSON value ({decode_error(err, at=False)})"
        args[key[0]] = value
        pos = skip_ws(text, end)
        if text.startswith(",", pos):
            pos += 1


@register_parser("gemma3_pythonic")
def parse_gemma3_pythonic(text: str) -> ParsedTurn:
    """gemma-3's pythonic calls: JSON values, commas between arguments optional (module docstring)."""
    return _call_list(text, _gemma3_args, GEMMA3_FORMAT)


def _closing_quote(text: str, pos: int) -> int:
    """The ``"`` that closes a value opened before ``pos``: the first followed by what the template
    writes next, ``\s*)`` then the end, ``]`` or ``, NAME(`` (the call's end), or ``\s*,\s*KEY\s*="``
    (the next argument), so code in a value (``print("hi")``, ``f("x", y=2)``) does not end it
    (-1: none). Each look-ahead stops at the next ``"`` at the latest, so every character is looked
    at a bounded number of times."""
    while True:
        quote = find(text, '"', pos)
        if quote == -1:
            return -1
        after = skip_ws(text, quote + 1)
        if text.startswith(")", after) and _call_ends(text, skip_ws(text, after + 1)):
            return quote
        key = _key_at(text, skip_ws(text, after + 1)) if text.startswith(",", after) else None
        if key is not None and text.startswith('"', key[1]):
            return quote
        pos = quote + 1


def _call_ends(text: str, at: int) -> bool:
    """What follows a call's ``)`` at ``at``: the end, the list's ``]`` or ``, NAME(``."""
    if at == len(text) or text.startswith("]", at):
        return True
    name = skip_ws(text, at + 1) if text.startswith(",", at) else -1
    return name != -1 and _name_at(text, name) > name and text.startswith("(", _name_at(text, name))


def _python_value(word: str):
    """The JSON value whose ``"%s"`` text ``word`` is (``1``, ``2.5``, ``True``, ``None``, ``[1, 2]``,
    ``{'k': 'v'}``), else ``word``: a Python literal that ``"%s"`` spells otherwise (``0x10``, ``1_000``,
    `` 7``) or that JSON cannot hold (a tuple, a set, ``{1: 2}``, bytes) is text."""
    try:
        value = ast.literal_eval(word)
        same = not isinstance(value, str) and str(value) == word and json.loads(json.dumps(value)) == value
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return word
    return value if same else word


def _llama4_args(text: str, pos: int):
    """``(KEY="VALUE" (, KEY="VALUE")*)? )`` from ``pos``."""
    args = {}
    at = skip_ws(text, pos)
    if text.startswith(")", at):
        return args, at + 1
    while True:
        key = _key_at(text, at)
        if key is None or not text.startswith('"', key[1]):
            return f'expected KEY="VALUE" at {clip_text(text[at:])!r}'
        close = _closing_quote(text, key[1] + 1)
        if close == -1:
            return f"argument {key[0]!r}: its value's quote is never closed"
        args[key[0]] = _python_value(text[key[1] + 1:close])
        at = skip_ws(text, close + 1)
        if text.startswith(")", at):
            return args, at + 1
        at = skip_ws(text, at + 1)  # past the ",": _closing_quote saw it there


@register_parser("llama4_pythonic")
def parse_llama4_pythonic(text: str) -> ParsedTurn:
    """Llama-4's pythonic calls: every value quoted as its ``"%s"`` text (module docstring)."""
    return _call_list(text, _llama4_args, LLAMA4_PYTHONIC_FORMAT, after_text=True)


_PY_START, _PY_END = "<|python_start|>", "<|python_end|>"


def _json_calls(text: str, pos: int) -> tuple[list, int]:
    """The JSON call objects from ``pos`` (whitespace, ``;`` or ``,`` between them): ``(results,
    index after the last)``; an invalid one ends the list with its error line."""
    results, at = [], skip_ws(text, pos)
    while text.startswith("{", at):
        call, end = decode_call(text, at, f"tool call {len(results) + 1}", ("parameters", "arguments"), LLAMA4_FORMAT)
        results.append(call)
        if end is None:
            return results, len(text)
        at = skip_ws(text, end)
        if text.startswith((";", ","), at):
            at = skip_ws(text, at + 1)
    return results, at


@register_parser("llama4")
def parse_llama4(text: str) -> ParsedTurn:
    """Llama-4's own calls: ``<|python_start|>TEXT<|python_end|>`` then JSON call objects; the
    content is the text before the block, inside it and after the calls."""
    start = find(text, _PY_START)
    if start == -1:
        return ParsedTurn(text.strip())
    end = find(text, _PY_END, start + len(_PY_START))
    if end == -1:
        return parsed_turn(text[:start] + text[start + len(_PY_START):],
                       [f"a {_PY_START} that is never closed with {_PY_END}; format: {LLAMA4_FORMAT}"])
    results, after = _json_calls(text, end + len(_PY_END))
    if not results:
        results = [f"no call after {_PY_END}; format: {LLAMA4_FORMAT}"]
    return parsed_turn(text[:start] + text[start + len(_PY_START):end] + text[after:], results)


XLAM_FORMAT = '[{"name": NAME, "arguments": {...}}, ...] (the whole turn)'


@register_parser("xlam")
def parse_xlam(text: str) -> ParsedTurn:
    """xLAM's calls: the turn is a JSON list of ``{"name", "arguments"}`` objects; a turn that does
    not start with ``[{`` is text."""
    body = text.strip()
    if not (body.startswith("[") and body.startswith("{", skip_ws(body, 1))):
        return ParsedTurn(body)
    try:
        items, end = _DECODER.raw_decode(body, 0)
    except (ValueError, RecursionError) as err:
        return parsed_turn("", [f"tool calls: invalid JSON ({decode_error(err)}) in {clip_text(body)!r}; format: {XLAM_FORMAT}"])
    return parsed_turn(body[end:], [to_call(o, f"tool call {i}", ("arguments", "parameters"), XLAM_FORMAT)
                                for i, o in enumerate(items, 1)])


INTERNLM2_FORMAT = '<|action_start|><|plugin|>\n{"name": NAME, "arguments": {...}}<|action_end|>'
_ACTION = "<|action_start|><|plugin|>"


@register_parser("internlm2")
def parse_internlm2(text: str) -> ParsedTurn:
    """InternLM2's calls: one JSON object per ``<|action_start|><|plugin|> ... <|action_end|>`` block."""
    from .formats import split_blocks, flag_unclosed
    from .parsing import loads

    def read(text, lo, hi, i):
        obj, err = loads(text[lo:hi])
        if err is not None:
            return f"tool call {i}: invalid JSON ({decode_error(err)}) in {clip_text(text[lo:hi])!r}; format: {INTERNLM2_FORMAT}"
        return to_call(obj, f"tool call {i}", ("arguments", "parameters"), INTERNLM2_FORMAT)
    return flag_unclosed(split_blocks(text, _ACTION, "<|action_end|>", read), _ACTION, INTERNLM2_FORMAT)


GRANITE_FC_FORMAT = '<function_call> {"name": NAME, "arguments": {...}} (one per call)'
_FUNCTION_CALL = "<function_call>"


@register_parser("granite_20b_fc")
def parse_granite_20b_fc(text: str) -> ParsedTurn:
    """granite-20b-functioncalling's calls: each ``<function_call>`` followed by one JSON object; the
    text before the first is the content."""
    start = find(text, _FUNCTION_CALL)
    if start == -1:
        return ParsedTurn(text.strip())
    results, pieces, pos = [], [text[:start]], start
    while pos != -1:
        at = skip_ws(text, pos + len(_FUNCTION_CALL))
        call, end = decode_call(text, at, f"tool call {len(results) + 1}", ("arguments", "parameters"),
                                GRANITE_FC_FORMAT)
        results.append(call)
        if end is None:
            break
        pos = find(text, _FUNCTION_CALL, end)
        pieces.append(text[end:] if pos == -1 else text[end:pos])
    return parsed_turn("".join(pieces), results)


GRANITE_FORMAT = '<|tool_call|>[{"name": NAME, "arguments": {...}}, ...]'
_GRANITE_CALL = "<|tool_call|>"


@register_parser("granite")
def parse_granite(text: str) -> ParsedTurn:
    """Granite-3's calls (vLLM's ``granite`` parser): ``<|tool_call|>`` then one JSON list of
    ``{"name", "arguments"}`` objects; the text before the marker and after the list is the content.
    One ``raw_decode`` from the marker: linear in the turn's length."""
    start = find(text, _GRANITE_CALL)
    if start == -1:
        return ParsedTurn(text.strip())
    at = skip_ws(text, start + len(_GRANITE_CALL))
    try:
        items, end = _DECODER.raw_decode(text, at)
    except (ValueError, RecursionError) as err:
        return parsed_turn(text[:start], [f"tool calls: invalid JSON ({decode_error(err)}) in {clip_text(text[at:])!r}; "
                                      f"format: {GRANITE_FORMAT}"])
    items = items if isinstance(items, list) else [items]
    return parsed_turn(text[:start] + text[end:], [to_call(o, f"tool call {i}", ("arguments",), GRANITE_FORMAT)
                                               for i, o in enumerate(items, 1)])


PHI4_MINI_FORMAT = 'functools[{"name": NAME, "arguments": {...}}, ...] or {"name": NAME, "arguments": {...}}, ...'
_PHI4_MINI = '{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments }}}'
"""How Phi-4-mini's template writes an earlier call (plain JSON; firefunction v2's template, which asks for the
same ``functools[`` prefix in its instructions, renders ``functools[`` itself)."""


@register_parser("phi4_mini")
def parse_phi4_mini(text: str) -> ParsedTurn:
    """Phi-4-mini's calls: ``functools[...]`` as its system prompt asks (``firefunction``), or the
    form its template renders earlier calls in, so the form the model learns: the turn is JSON
    ``{"name", "arguments"}`` objects separated by commas. Text after the last one is content.
    Each ``raw_decode`` starts where the last ended: linear in the turn's length."""
    if "functools[" in text:
        from .parser_base import TOOL_PARSERS

        return TOOL_PARSERS["firefunction"](text)
    body = text.strip()
    if not (body.startswith("{") and body.startswith('"', skip_ws(body, 1))):
        return ParsedTurn(body)
    results, pos = [], 0
    while True:
        where = f"tool call {len(results) + 1}"
        try:
            obj, end = _DECODER.raw_decode(body, pos)
        except (ValueError, RecursionError) as err:
            literal = _python_calls(body[pos:])  # arguments held as a dict: the template writes Python's repr
            if literal is None:
                results.append(f"{where}: invalid JSON ({decode_error(err)}) in {clip_text(body[pos:])!r}; "
                               f"format: {PHI4_MINI_FORMAT}")
                return parsed_turn("", results)
            return parsed_turn("", results + [to_call(o, f"tool call {i}", ("arguments",), PHI4_MINI_FORMAT)
                                          for i, o in enumerate(literal, len(results) + 1)])
        results.append(to_call(obj, where, ("arguments",), PHI4_MINI_FORMAT))
        comma = skip_ws(body, end)
        nxt = skip_ws(body, comma + 1) if body.startswith(",", comma) else -1
        if nxt == -1 or not body.startswith("{", nxt):
            return parsed_turn(body[end:], results)
        pos = nxt


def _python_calls(text: str) -> list | None:
    """The call objects of ``text`` when all of it is Python literals separated by commas (the
    template renders a dict's ``arguments`` as ``{'a': 1}``): ``ast.literal_eval``, which builds
    literals only and runs nothing; None when it is not."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    items = list(value) if isinstance(value, tuple) else [value]
    return items if all(isinstance(o, dict) for o in items) else None


ATEM_FORMAT = ('to=NAME<|message|><atem:function_calls><atem:invoke name="NAME"><atem:parameter name="KEY">VALUE'
               "</atem:parameter></atem:invoke></atem:function_calls>")
_MESSAGE = "<|message|>"


def _drop_headers(content: str) -> str:
    """``content`` without the ``to=RECIPIENT<|message|>`` header of a call message."""
    at = skip_ws(content, 0)
    while content.startswith("to=", at):
        message = find(content, _MESSAGE, at)
        if message == -1 or any(c.isspace() for c in content[at:message]):
            break
        at = skip_ws(content, message + len(_MESSAGE))
    return content[at:]


@register_parser("atem")
def parse_atem(text: str) -> ParsedTurn:
    """Muse Glimmer's ATEM calls: ``<atem:invoke name="N">`` blocks of ``<atem:parameter name="K">V``
    (values JSON when they parse as JSON, else text, as the template writes them), each in a
    message addressed ``to=N``; the content is what is left without the headers and wrappers."""
    from .more_formats import invoke_calls, strip_wrappers

    turn = invoke_calls(text, "<atem:invoke", "</atem:invoke>", "<atem:parameter", "</atem:parameter>", ATEM_FORMAT)
    turn = strip_wrappers(turn, "<atem:function_calls>", "</atem:function_calls>", "<|eom|>")
    messages = turn.content.split("<|start|>assistant")  # several calls: one message each
    if turn.calls or turn.errors:
        messages = [_drop_headers(m) for m in messages]
    return ParsedTurn("".join(messages).strip(), turn.calls, turn.errors)


MARKERS = (("<|python_start|>", "llama4"), (_ACTION, "internlm2"), (_FUNCTION_CALL, "granite_20b_fc"),
           (_GRANITE_CALL, "granite"),
           ("<atem:invoke", "atem"))
TEMPLATE_MARKERS = (  # the template source's spelling of the call format (the turn has no marker of its own)
    ("{{ key }}={{ val | tojson }}", "gemma3_pythonic"), ("param + '=\"'", "llama4_pythonic"),
    ("<|python_start|>", "llama4"), ("param + '=' -}}", "pythonic"),
    ('[{"name": "tool_call_name", "arguments"', "xlam"), (_PHI4_MINI, "phi4_mini"),
)


def _register() -> None:
    from .formats import add_markers

    add_markers(MARKERS, TEMPLATE_MARKERS)


_register()
