"""Tool-call parsers: one policy turn's text -> the tool calls in it, the rest, and what was malformed.

A parser is a function ``text -> ParsedTurn`` in the ``TOOL_PARSERS`` registry (filled by
``@register_parser("name")``), or a user's ``file.py:fn`` / ``package.module:fn`` (``load_parser``).

Built-in formats:

* ``hermes`` (Hermes, Qwen2.5, Qwen3, and every template that lists tools inside ``<tools></tools>``)::

      some text
      <tool_call>
      {"name": "add", "arguments": {"a": 1, "b": 2}}
      </tool_call>

  Any number of blocks per turn. ``content`` is the text outside the blocks. A block left open at
  the end (the turn was cut by the token limit) is an error, and so is a stray ``</tool_call>``.
The other formats the published templates teach (``qwen3_coder``, ``mistral``, ``glm45``, ``kimi_k2``,
``harmony``, ``deepseek``, ``pythonic``, ``command_r``) and ``auto`` are in :mod:`.formats`.

* ``llama3_json`` (Llama-3.1 / 3.2 custom tools): the whole message, optionally after
  ``<|python_tag|>``, is ``{"name": ..., "parameters": {...}}`` (``"arguments"`` is accepted too),
  or several such objects separated by ``;``. A message that starts neither with
  ``<|python_tag|>`` nor with ``{"`` is plain text: content, no call.

In both, a call's ``arguments`` may be missing (no arguments) or a JSON string holding an object
(some models double-encode it). Anything else malformed (invalid JSON, no ``"name"``, arguments
that are not an object) gives one line in ``errors`` instead of a call: the rollout shows those
lines to the model as observations, so they say what was wrong and what the format is.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Callable

from ..errors import ConfigError
from ..userfn import SPEC_FORMS, resolve_spec
from .parsing import decode_error, find, json_problem, loads, skip_ws

__all__ = ["ToolCall", "ParsedTurn", "TOOL_PARSERS", "register_parser", "load_parser"]


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


def _short(text: str, n: int = 80) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 3] + "..."


def _shown(value) -> str:
    """``value`` as the model is shown it: its JSON, or its repr where it has none (a user parser's)."""
    try:
        return _short(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return _short(repr(value)) if not isinstance(value, (dict, list, tuple)) else type(value).__name__


def _to_call(obj, where: str, args_keys: tuple[str, ...], fmt: str) -> ToolCall | str:
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


def _json_calls(results: list) -> list:
    """``results`` with each call whose arguments are not JSON (a ``set``, ``bytes``...) replaced by
    the error line saying so: a parser never returns such a call (the gateway sends arguments as
    JSON text, a tool's worker receives them as JSON)."""
    out = []
    for i, r in enumerate(results, 1):
        problem = json_problem(r.arguments) if isinstance(r, ToolCall) else None
        out.append(r if problem is None else
                   f"tool call {i} ({r.name}): the arguments are not JSON ({problem}); arguments are a JSON object")
    return out


def _parsed(content: str, results: list) -> ParsedTurn:
    """The turn of ``content`` and ``results`` (calls and error lines, in the turn's order)."""
    results = _json_calls(results)
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
                           f"{_short(body)!r}; format: {HERMES_FORMAT}")
            continue
        results.append(_to_call(obj, f"tool call {index}", ("arguments", "parameters"), HERMES_FORMAT))
    return _parsed("".join(pieces), results)


LLAMA3_FORMAT = '{"name": <tool name>, "parameters": {<argument>: <value>, ...}} (several separated by ";")'
PYTHON_TAG = "<|python_tag|>"
_DECODER = json.JSONDecoder()


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
            obj, end = _DECODER.raw_decode(body, pos)
        except (ValueError, RecursionError) as err:  # JSONDecodeError, a number too long, too deep
            results.append(f"tool call {index}: invalid JSON ({decode_error(err)}) in "
                           f"{_short(body[pos:])!r}; format: {LLAMA3_FORMAT}")
            return _parsed("", results)
        results.append(_to_call(obj, f"tool call {index}", ("parameters", "arguments"), LLAMA3_FORMAT))
        separator = _separator_end(body, end)
        if separator is None:
            return _parsed(body[end:], results)  # text after the last call is content
        pos = separator
    return _parsed("", results)


# ---------------------------------------------------------------------------------------------
# Loading a parser by name or from the user's code


def _err(spec: str, what: str) -> ConfigError:
    return ConfigError(f"rollout.tool_parser={spec!r}: {what}")


def _normalise(spec: str, text: str, out) -> ParsedTurn:
    """A user parser's result as a ``ParsedTurn``: it may return one, or a list of ``ToolCall`` or
    of ``(name, arguments)`` pairs (then ``content`` is the whole text)."""
    if isinstance(out, ParsedTurn):  # used as is, but for calls whose arguments are not JSON
        results = _json_calls([*out.calls, *out.errors])
        if all(isinstance(r, ToolCall) for r in results[:len(out.calls)]):
            return out
        return ParsedTurn(out.content, [r for r in results if isinstance(r, ToolCall)],
                          [r for r in results if isinstance(r, str)], out.reasoning)
    if not isinstance(out, (list, tuple)):
        raise TypeError(f"tool parser {spec!r} returned a {type(out).__name__}; expected a ParsedTurn, "
                        "a list of ToolCall or a list of (name, arguments) pairs")
    results = []
    for i, item in enumerate(out, 1):
        if isinstance(item, ToolCall):
            results.append(item)
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            results.append(_to_call({"name": item[0], "arguments": item[1]}, f"tool call {i}",
                                    ("arguments",), "(name, {arguments})"))
        else:
            raise TypeError(f"tool parser {spec!r} returned {item!r} as call {i}; expected a ToolCall "
                            "or a (name, arguments) pair")
    return _parsed(text, results)


def load_parser(spec: str) -> Parser:
    """The parser ``spec`` names: a key of ``TOOL_PARSERS`` or a user's ``module:fn`` / ``file.py:fn``."""
    if not isinstance(spec, str) or not spec.strip():
        raise _err(spec, f"expected a parser name {sorted(TOOL_PARSERS)} or {SPEC_FORMS}")
    spec = spec.strip()
    if spec in TOOL_PARSERS:
        return TOOL_PARSERS[spec]
    if ":" not in spec:
        raise _err(spec, f"unknown tool-call parser; valid names: {sorted(TOOL_PARSERS)}, "
                         f"or a function of your own as {SPEC_FORMS}")
    fn = resolve_spec(spec, lambda what: _err(spec, what))
    if not callable(fn):
        raise _err(spec, f"{spec.rsplit(':', 1)[1]!r} is a {type(fn).__name__}, not a callable")
    try:
        inspect.signature(fn).bind("text")
    except TypeError as err:
        raise _err(spec, f"a parser is called as fn(text) -> ParsedTurn; {err}") from None
    except ValueError:
        pass  # no introspectable signature: trust it

    def parse(text: str) -> ParsedTurn:
        return _normalise(spec, text, fn(text))

    parse.__name__ = getattr(fn, "__name__", "parse")
    return parse


from . import formats as _formats  # noqa: E402,F401 - registers the other formats and ``auto``
from . import more_formats as _more_formats  # noqa: E402,F401 - the newer templates' formats
from . import pythonic_formats as _pythonic_formats  # noqa: E402,F401 - gemma-3 / Llama-4 call formats
