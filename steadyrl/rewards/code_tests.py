"""The pieces of the ``code`` reward that need no sandbox: the program a completion holds, the
tests a data row holds, and whether an output is the expected one.

Program (option ``extract``): the last fenced block (```` ```python ... ``` ````, or a fence with
no language; a block in another language is skipped), the first one, or the first group of a
``pattern`` (``extract: regex``). No block: the sample scores 0 (reason ``no_code``).

Tests (option ``test_format``, ``auto`` by default: told apart by their shape):

* ``stdio``: APPS / TACO / CodeContests' ``input_output``: ``{"inputs": [...], "outputs": [...]}``
  (a JSON text or a mapping); each input is fed on stdin, each output compared with stdout. An
  input or output given as a list of lines is joined with newlines.
* ``call``: the same with ``"fn_name"``: each input is the list of arguments of ``fn_name(*args)``
  (a top-level function, or a method of a class ``Solution``), each output its expected value.
* ``assert``: Python ``assert`` statements (MBPP's ``test_list``): a list of strings, or one text
  whose top-level ``assert`` statements are the tests and other statements (imports, helpers)
  run first.

Comparison (``stdio``): lines with trailing whitespace removed and trailing blank lines dropped
must match; failing that, the whitespace-separated tokens must, where an expected integer (digits
with an optional sign) matches only a token of exactly that value (``7`` or ``7.0``, never
``7.0000001``), and two other tokens that both parse as numbers match within ``tolerance``
(``math.isclose`` with ``rel_tol = abs_tol = tolerance``). ``call``: equal as JSON values (a tuple
is a list), an expected integer exactly, other numbers within ``tolerance``; an expected value
``[x]`` also accepts ``x`` (APPS wraps some).
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal

__all__ = ["Tests", "TestsError", "TEST_FORMATS", "EXTRACTIONS", "extract_program", "parse_tests",
           "stdout_matches", "value_matches"]

TEST_FORMATS = ("auto", "stdio", "call", "assert")
EXTRACTIONS = ("last_block", "first_block", "regex")
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = ("", "python", "py", "python3", "py3")


class TestsError(ValueError):
    """A row's tests cannot be read (the sample scores ``None``: a data problem)."""

    __test__ = False  # not a pytest class


@dataclass
class Tests:
    __test__ = False  # not a pytest class
    mode: str  # "stdio" | "call" | "assert"
    cases: list  # stdin texts | argument lists | assert statements
    expected: list = field(default_factory=list)  # stdio / call only
    fn_name: str = ""
    setup: str = ""


def extract_program(text: str, how: str = "last_block", pattern: re.Pattern | None = None) -> str | None:
    """The program in ``text`` (module docstring); ``None`` when there is none."""
    if how == "regex":
        found = pattern.search(text) if pattern is not None else None
        if found is None:
            return None
        return found.group(1) if found.groups() else found.group(0)
    blocks = [body for tag, body in _FENCE.findall(text) if tag.strip().lower() in _PYTHON_TAGS]
    if not blocks:
        return None
    return blocks[0] if how == "first_block" else blocks[-1]


def _lines(value) -> str:
    if isinstance(value, list):
        return "\n".join(str(x) for x in value) + "\n"
    return str(value)


def _split_asserts(text: str) -> tuple[str, list[str]]:
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise TestsError(f"the assert tests do not parse: {err}") from None
    setup, cases = [], []
    for node in tree.body:
        source = ast.get_source_segment(text, node) or ""
        (cases if isinstance(node, ast.Assert) else setup).append(source)
    return "\n".join(setup), cases


def parse_tests(value, fmt: str = "auto", max_tests: int | None = None) -> Tests:
    """The tests of one row (module docstring); raises :class:`TestsError`."""
    if isinstance(value, str) and value.lstrip().startswith(("{", "[")):
        try:
            value = json.loads(value)
        except ValueError:
            if fmt in ("stdio", "call"):
                raise TestsError("the tests are not valid JSON") from None
    if fmt == "auto":
        fmt = ("call" if value.get("fn_name") else "stdio") if isinstance(value, dict) else "assert"
    if fmt == "assert":
        if isinstance(value, str):
            setup, cases = _split_asserts(value)
        elif isinstance(value, list) and all(isinstance(x, str) for x in value):
            parts = [_split_asserts(x) for x in value]
            setup = "\n".join(s for s, _ in parts if s)
            cases = [c for _, some in parts for c in some]
        else:
            raise TestsError(f"assert tests must be a text or a list of texts, got {type(value).__name__}")
        if not cases:
            raise TestsError("the tests hold no assert statement")
        return Tests("assert", cases[:max_tests], setup=setup)
    if not isinstance(value, dict) or not isinstance(value.get("inputs"), list) \
            or not isinstance(value.get("outputs"), list):
        raise TestsError('expected {"inputs": [...], "outputs": [...]} (optionally with "fn_name")')
    inputs, outputs = value["inputs"], value["outputs"]
    if len(inputs) != len(outputs) or not inputs:
        raise TestsError(f"{len(inputs)} inputs for {len(outputs)} outputs")
    inputs, outputs = inputs[:max_tests], outputs[:max_tests]
    if fmt == "call":
        name = value.get("fn_name")
        if not isinstance(name, str) or not name.isidentifier():
            raise TestsError(f"fn_name={name!r} is not a function name")
        args = [x if isinstance(x, list) else [x] for x in inputs]
        return Tests("call", args, list(outputs), fn_name=name)
    return Tests("stdio", [_lines(x) for x in inputs], [_lines(x) for x in outputs])


def _number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


_INTEGER = re.compile(r"[+-]?\d+")


def _exactly(token: str, integer: str) -> bool:
    """Whether ``token`` is a number of exactly the value of the integer text ``integer``."""
    if _INTEGER.fullmatch(token):
        return int(token) == int(integer)
    try:
        return Decimal(token) == int(integer)  # exact, and cheap for any exponent
    except (ArithmeticError, ValueError):
        return False


def _close(a: float, b: float, tolerance: float) -> bool:
    return a == b or (tolerance > 0 and math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance))


def stdout_matches(got: str, expected: str, tolerance: float = 0.0) -> bool:
    """Whether ``got`` is ``expected`` up to whitespace (and numbers within ``tolerance``)."""
    def lines(text: str) -> list[str]:
        out = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while out and not out[-1]:
            out.pop()
        return out

    if lines(got) == lines(expected):
        return True
    a, b = got.split(), expected.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        if _INTEGER.fullmatch(y) and len(y) <= 4300 and len(x) <= 4300:
            if not _exactly(x, y):
                return False
            continue
        nx, ny = _number(x), _number(y)
        if nx is None or ny is None or not _close(nx, ny, tolerance):
            return False
    return True


def value_matches(got, expected, tolerance: float = 0.0) -> bool:
    """Whether a returned value (as JSON data) equals the expected one (module docstring)."""
    if _equal(got, expected, tolerance):
        return True
    return isinstance(expected, list) and len(expected) == 1 and _equal(got, expected[0], tolerance)


def _equal(a, b, tolerance: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b if isinstance(a, bool) and isinstance(b, bool) else False
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(b, int) and isinstance(a, float):  # an expected integer: exactly
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        try:
            return _close(float(a), float(b), tolerance)
        except OverflowError:
            return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y, tolerance) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k], tolerance) for k in a)
    return a == b
