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

from ..errors import ConfigError
from ..userfn import SPEC_FORMS, resolve_spec
from .parser_base import (  # noqa: F401 - re-exported: the registry's face
    HERMES_FORMAT,
    LLAMA3_FORMAT,
    PYTHON_TAG,
    TOOL_PARSERS,
    ParsedTurn,
    Parser,
    ToolCall,
    json_calls,
    parse_hermes,
    parse_llama3_json,
    parsed_turn,
    register_parser,
    to_call,
)

__all__ = ["ToolCall", "ParsedTurn", "TOOL_PARSERS", "register_parser", "load_parser"]


def _err(spec: str, what: str) -> ConfigError:
    return ConfigError(f"rollout.multi_turn.tool_parser={spec!r}: {what}")


def _normalise(spec: str, text: str, out) -> ParsedTurn:
    """A user parser's result as a ``ParsedTurn``: it may return one, or a list of ``ToolCall`` or
    of ``(name, arguments)`` pairs (then ``content`` is the whole text)."""
    if isinstance(out, ParsedTurn):  # used as is, but for calls whose arguments are not JSON
        results = json_calls([*out.calls, *out.errors])
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
            results.append(to_call({"name": item[0], "arguments": item[1]}, f"tool call {i}",
                                    ("arguments",), "(name, {arguments})"))
        else:
            raise TypeError(f"tool parser {spec!r} returned {item!r} as call {i}; expected a ToolCall "
                            "or a (name, arguments) pair")
    return parsed_turn(text, results)


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
