"""The tool-call parsers' shared parts: :class:`ToolCall` and :class:`ParsedTurn`, the ``TOOL_PARSERS``
registry and its decorator, the helpers every format's parser builds its turn with (``clip_text``,
``to_call``, ``parsed_turn``, ``JSON_DECODER``), and the two first formats (``hermes``, ``llama3_json``).

The other formats (:mod:`.formats`, :mod:`.more_formats`, :mod:`.pythonic_formats`) build on this module;
:mod:`.parsers` is the registry's face (``load_parser``) and imports them all, so that nothing here
imports a format's module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from .parsing import decode_error, find, json_problem, loads, skip_ws

__all__ = ["ToolCall", "ParsedTurn", "Parser", "TOOL_PARSERS", "register_parser", "clip_text", "to_call",
           "parsed_turn", "json_calls", "decode_call", "JSON_DECODER", "parse_hermes", "parse_llama3_json", "HERMES_FORMAT", "LLAMA3_FORMAT",
           "PYTHON_TAG"]


@dataclass(frozen=True)
class ToolCall:
    """One call the policy asked for: the tool's name and its JSON-object arguments."""

    name: str
    arguments: dict
    id: str | None = None  # the call id the model wrote, in formats that have one (Mistral, Kimi-K2)


@dataclass(frozen=True)
class ParsedTurn:
    """A policy turn split into its text, its well-formed calls and one line per malformed call."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reasoning: str | None = None  # formats with a reasoning channel (Harmony): it, and content is the answer alone


Parser = Callable[[str], ParsedTurn]
TOOL_PARSERS: dict[str, Parser] = {}


def register_parser(name: str):
    """Decorator: put a ``text -> ParsedTurn`` function in ``TOOL_PARSERS`` under ``name``."""

    def add(fn: Parser) -> Parser:
        if name in TOOL_PARSERS:
            raise ValueError(f"tool parser {name!r} is registered twice")
        TOOL_PARSERS[name] = fn
        return fn

    return add


def clip_text(text: str, n: int = 80) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 3] + "..."


def _shown(value) -> str:
    """``value`` as the model is shown it: its JSON, or its repr where it has none (a user parser's)."""
    try:
        return clip_text(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return clip_text(repr(value)) if not isinstance(value, (dict, list, tuple)) else type(value).__name__


def to_call(obj, where: str, args_keys: tuple[str, ...], fmt: str) -> ToolCall | str:
    """A ``ToolCall`` from a decoded JSON value, or the error line saying why not."""
    if not isinstance(obj, dict):
        shown = _shown(obj)
        return f"{where}: expected a JSON object, got {type(obj).__name__} {shown}; format: {fmt}"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return f"{where}: missing \"name\" (a non-empty string); format: {fmt}"
    key = next((k for k in args_keys if k in obj), None)
    arguments = {} if key is None else obj[key]
    if isinstance(arguments, str):  # double-encoded: '{"a": 1}'
        decoded, err = loads(arguments)
        arguments = arguments if err is not None else decoded
    if not isinstance(arguments, dict):
        return (f"{where} ({name}): \"{key}\" must be a JSON object, got "
                f"{type(arguments).__name__} {_shown(arguments)}; format: {fmt}")
    return ToolCall(name=name.strip(), arguments=arguments)


def decode_call(text: str, at: int, where: str, args_keys: tuple[str, ...], fmt: str):
    """The JSON call object at ``text[at]``: ``(ToolCall or error line, index after it)``; text that is not
    a JSON value there gives its error line and ``None`` (the caller stops reading calls)."""
    try:
        obj, end = JSON_DECODER.raw_decode(text, at)
    except (ValueError, RecursionError) as err:
        return f"{where}: invalid JSON ({decode_error(err)}) in {clip_text(text[at:])!r}; format: {fmt}", None
    return to_call(obj, where, args_keys, fmt), end


def json_calls(results: list) -> list:
    """``results`` with each call whose arguments are not JSON (a ``set``, ``bytes``...) replaced by
    the error line saying so: a parser never returns such a call (the gateway sends arguments as
    JSON text, a tool's worker receives them as JSON)."""
    out = []
    for i, r in enumerate(results, 1):
        problem = json_problem(r.arguments) if isinstance(r, ToolCall) else None
        out.append(r if problem is None else
                   f"tool call {i} ({r.name}): the arguments are not JSON ({problem}); arguments are a JSON object")
    return out


def parsed_turn(content: str, results: list) -> ParsedTurn:
    """The turn of ``content`` and ``results`` (calls and error lines, in the turn's order)."""
    results = json_calls(results)
    calls = [r for r in results if isinstance(r, ToolCall)]
    errors = [r for r in results if isinstance(r, str)]
    return ParsedTurn(content=content.strip(), calls=calls, errors=errors)


HERMES_FORMAT = '<tool_call>{"name": <tool name>, "arguments": {<argument>: <value>, ...}}</tool_call>'
_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"


@register_parser("hermes")
def parse_hermes(text: str) -> ParsedTurn:
    """``<tool_call>{json}</tool_call>`` blocks anywhere in the turn (see the module docstring)."""
    pieces, results, pos, index = [], [], 0, 0
    start = stray = -2  # the next opener and closer at or after pos (-1: none; searched again once passed)
    while True:
        start = find(text, _HERMES_OPEN, pos) if start != -1 and start < pos else start
        stray = find(text, _HERMES_CLOSE, pos) if stray != -1 and stray < pos else stray
        if stray != -1 and (start == -1 or stray < start):
            results.append(f"a {_HERMES_CLOSE} without a {_HERMES_OPEN} before it; format: {HERMES_FORMAT}")
            pieces.append(text[pos:stray])
            pos = stray + len(_HERMES_CLOSE)
            continue
        if start == -1:
            pieces.append(text[pos:])
            break
        pieces.append(text[pos:start])
        index += 1
        end = find(text, _HERMES_CLOSE, start)
        if end == -1:
            results.append(f"tool call {index}: {_HERMES_OPEN} is never closed with {_HERMES_CLOSE}; "
                           f"format: {HERMES_FORMAT}")
            break
        body = text[start + len(_HERMES_OPEN): end].strip()
        pos = end + len(_HERMES_CLOSE)
        obj, err = loads(body)
        if err is not None:
            results.append(f"tool call {index}: invalid JSON ({decode_error(err)}) in "
                           f"{clip_text(body)!r}; format: {HERMES_FORMAT}")
            continue
        results.append(to_call(obj, f"tool call {index}", ("arguments", "parameters"), HERMES_FORMAT))
    return parsed_turn("".join(pieces), results)


LLAMA3_FORMAT = '{"name": <tool name>, "parameters": {<argument>: <value>, ...}} (several separated by ";")'
PYTHON_TAG = "<|python_tag|>"
JSON_DECODER = json.JSONDecoder()


def _separator_end(body: str, pos: int) -> int | None:
    """The end of the ``;`` (with whitespace around it) at ``pos``, or None when none is there."""
    semi = skip_ws(body, pos)
    return skip_ws(body, semi + 1) if body.startswith(";", semi) else None


@register_parser("llama3_json")
def parse_llama3_json(text: str) -> ParsedTurn:
    """The turn as one or more ``;``-separated JSON calls (see the module docstring)."""
    body = text.strip()
    tagged = body.startswith(PYTHON_TAG)
    if tagged:
        body = body[len(PYTHON_TAG):].strip()
    if not tagged and not (body.startswith("{") and body.startswith('"', skip_ws(body, 1))):
        return ParsedTurn(content=body)
    results, pos, index = [], 0, 0
    while pos < len(body):
        index += 1
        try:
            obj, end = JSON_DECODER.raw_decode(body, pos)
        except (ValueError, RecursionError) as err:  # JSONDecodeError, a number too long, too deep
            results.append(f"tool call {index}: invalid JSON ({decode_error(err)}) in "
                           f"{clip_text(body[pos:])!r}; format: {LLAMA3_FORMAT}")
            return parsed_turn("", results)
        results.append(to_call(obj, f"tool call {index}", ("parameters", "arguments"), LLAMA3_FORMAT))
        separator = _separator_end(body, end)
        if separator is None:
            return parsed_turn(body[end:], results)  # text after the last call is content
        pos = separator
    return parsed_turn("", results)


# ---------------------------------------------------------------------------------------------
# Loading a parser by name or from the user's code
