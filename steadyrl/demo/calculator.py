"""The tool of the multi-turn demo: a calculator that evaluates arithmetic the policy writes.

The expression is model-written text, so it is treated as hostile. It is never given to
``eval``: it is parsed with :mod:`ast` and walked by a small interpreter that knows only

    numbers (int or decimal literals), unary + -, binary + - * /, parentheses

in exact rational arithmetic (:class:`fractions.Fraction`). Everything else is refused with a
``ValueError`` that says why (the tool runner returns that text to the model): names, calls,
attributes, ``**``, ``//``, ``%``, strings, booleans. Limits bound the work whatever the input:

* at most :data:`MAX_EXPRESSION_CHARS` characters (so the parse tree is small and shallow);
* every literal and every intermediate result at most :data:`MAX_MAGNITUDE` in absolute value,
  and every denominator at most :data:`MAX_MAGNITUDE` (no huge-number blow-up);
* division by zero is an error.

The result is the exact integer when there is one (``"10063"``), else a decimal rounded to six
places with trailing zeros removed (``"0.333333"``).
"""

from __future__ import annotations

import ast
import operator
from fractions import Fraction

__all__ = ["MAX_EXPRESSION_CHARS", "MAX_MAGNITUDE", "calculate", "evaluate_expression"]

MAX_EXPRESSION_CHARS = 100
"""Longest expression accepted, in characters."""

MAX_MAGNITUDE = 10**15
"""Largest absolute value of a literal, an intermediate result or a denominator."""

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise ValueError(f"number out of range: the calculator works with magnitudes up to {MAX_MAGNITUDE:.0e}")
    return value


def _literal(node: ast.Constant) -> Fraction:
    value = node.value
    # bool is an int subclass: True + True is not arithmetic anyone asked for
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"only numbers are allowed, got {type(value).__name__} {value!r}"[:120])
    if isinstance(value, float) and not abs(value) <= MAX_MAGNITUDE:  # also refuses inf and nan
        raise ValueError(f"number out of range: the calculator works with magnitudes up to {MAX_MAGNITUDE:.0e}")
    # a float literal means its decimal text (0.1 is 1/10, not the binary float nearest to it)
    return _bounded(Fraction(repr(value)) if isinstance(value, float) else Fraction(value))


def _walk(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant):
        return _literal(node)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _bounded(_UNARY[type(node.op)](_walk(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _walk(node.left), _walk(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _bounded(_BINARY[type(node.op)](left, right))
    what = type(node.op).__name__ if isinstance(node, (ast.BinOp, ast.UnaryOp)) else type(node).__name__
    raise ValueError(f"unsupported syntax ({what}): only numbers, + - * / and parentheses are allowed")


def evaluate_expression(expression: str) -> Fraction:
    """The exact value of ``expression`` (see the module docstring for what is accepted)."""
    if not isinstance(expression, str):
        raise ValueError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression too long: {len(expression)} characters, at most {MAX_EXPRESSION_CHARS}")
    if not expression.strip():
        raise ValueError("expression is empty")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError) as err:  # ValueError: null bytes
        raise ValueError(f"not an arithmetic expression: {expression!r}") from err
    return _walk(tree.body)


def format_number(value: Fraction) -> str:
    """``10063`` -> ``"10063"``; ``1/3`` -> ``"0.333333"``; ``-5/2`` -> ``"-2.5"``."""
    if value.denominator == 1:
        return str(value.numerator)
    scaled = round(abs(value) * 10**6)  # exact: Fraction rounds half to even
    whole, part = divmod(scaled, 10**6)
    text = f"{whole}.{part:06d}".rstrip("0").rstrip(".")
    return "-" + text if value < 0 and scaled else text


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the result.

    Args:
        expression: Arithmetic with numbers, + - * / and parentheses.
    """
    return format_number(evaluate_expression(expression))
