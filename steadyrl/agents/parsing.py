"""Linear-time scanning of model-written text: the only primitives the tool-call parsers use.

Model-written text is hostile, and a parser runs inside the trainer holding the GIL: a regular
expression with nested or adjacent unbounded repeats (``(\\{.*?\\})\\s*(?:```\\s*)?``) can backtrack
for minutes on a marker followed by a few dozen spaces. So the parsers never hand the text to such
a pattern. They read it with these functions, each of which looks at the characters from ``pos``
up to what it returns and no further:

* :func:`find`: the next occurrence of a literal (``str.find``), within an optional ``end``;
* :func:`run_end`: the end of a run of characters of one class (a compiled one-class pattern);
* :func:`skip_ws` / :func:`back_ws`: past whitespace, forwards or backwards.

and they advance past what they consumed, so each character is looked at a bounded number of
times: the work is linear in the text. The property test (tests/agents/test_parser_linearity.py)
counts the characters these functions scan and the Python lines a parser runs, on inputs of n and
2n characters, and a rule test checks that no other pattern is used in the parser modules.

:func:`loads` decodes JSON without raising (a 5,000-digit number or a 100,000-deep array are
errors like any other), and :func:`json_problem` says why a call's arguments are not JSON (a
``set``, ``bytes``, a ``complex``...): parsers never return such arguments (see ``_parsed``).
"""

from __future__ import annotations

import json
import re

__all__ = ["find", "run_end", "skip_ws", "back_ws", "loads", "json_problem", "decode_error"]

WS = " \t\n\r\f\v"
"""What the parsers skip as whitespace (``str.strip``'s ASCII set)."""


def find(text: str, needle: str, pos: int = 0, end: int | None = None) -> int:
    """``text.find(needle, pos, end)``: scans ``text[pos:]`` up to the occurrence (or ``end``)."""
    return text.find(needle, pos) if end is None else text.find(needle, pos, end)


def run_end(text: str, pos: int, run: re.Pattern, end: int | None = None) -> int:
    """The end of the run of ``run``'s characters that starts at ``pos``; ``run`` is one character
    class with one repeat (``[\\w.\\-]*``), which cannot backtrack."""
    return run.match(text, pos, len(text) if end is None else end).end()


_WS_RUN = re.compile(r"\s*")


def skip_ws(text: str, pos: int, end: int | None = None) -> int:
    """The first index at or after ``pos`` (before ``end``) that is not whitespace."""
    return run_end(text, pos, _WS_RUN, end)


def back_ws(text: str, pos: int, floor: int = 0) -> int:
    """The start of the whitespace run that ends at ``pos`` (not before ``floor``)."""
    while pos > floor and text[pos - 1].isspace():
        pos -= 1
    return pos


def decode_error(err: Exception, at: bool = True) -> str:
    """What was wrong with a JSON text, short: ``msg at character N`` (``at``: with the position) or
    the error's own words."""
    if isinstance(err, json.JSONDecodeError):
        return f"{err.msg} at character {err.pos}" if at else err.msg
    if isinstance(err, RecursionError):
        return "nested too deeply"
    text = str(err).split(";")[0].strip()
    return text if len(text) <= 80 else text[:77] + "..."


def loads(text: str):
    """``(value, None)`` of a JSON text, or ``(None, error)``: an error, never a raise (invalid
    JSON, a number longer than Python converts, nesting deeper than the decoder recurses)."""
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as err:  # JSONDecodeError is a ValueError
        return None, err


def json_problem(arguments) -> str | None:
    """Why ``arguments`` cannot be written as JSON (a set, bytes, a complex number, a key that is not
    a string, nesting too deep), or None: what a parser returns must go to ``json.dumps``."""
    try:
        json.dumps(arguments)
    except (TypeError, ValueError, RecursionError) as err:
        reason = decode_error(err) if not isinstance(err, TypeError) else str(err)
        return reason if len(reason) <= 80 else reason[:77] + "..."
    return None
