"""Cheat-proof ``assert`` tests of the ``code`` reward: each ``assert`` statement whose calls of the
program are plain calls with literal arguments is split in two - the calls, run in the sandbox by
the harness, which sends back only what they returned as plain data (tagged JSON: ``int``,
``float``, ``complex``, ``bool``, ``None``, ``str``, ``bytes``, ``list``, ``tuple``, ``set``,
``frozenset``, ``dict``, of those exact types) - and the check, evaluated here, in the reward's
process, on those values. The program never sees the expected values, and nothing it does to its
own interpreter (patching ``AssertionError`` or ``builtins``, ``sys.exit`` / ``os._exit(0)``,
writing to the harness's pipe, objects whose ``__eq__`` is always true) can make a check pass: a
value of any other type decodes to an :class:`Opaque` that equals nothing.

A statement converts when its expression is made only of: literals and displays (``[...]``,
``(...)``, ``{...}``); calls of the program (``f(...)`` with literal arguments, ``f`` a name that is
not one of the helpers below, or one the program defines at top level); the helpers ``set``,
``frozenset``, ``sorted``, ``list``, ``tuple``, ``dict``, ``len``, ``abs``, ``round``, ``sum``,
``min``, ``max``, ``str``, ``int``, ``float``, ``bool`` and ``math.isclose``; comparisons (``==``,
``!=``, ``<``, ``<=``, ``>``, ``>=``, ``is``, ``is not``, ``in``, ``not in``), ``and`` / ``or`` /
``not``, unary ``-`` / ``+``, ``+ - * / // %`` and subscripts (``f(x)[0]``, ``f(x)[1:3]``). Anything else (a name from the tests' setup, a
method call, a lambda, a nested call of the program) is not converted: the statement runs in the
program's own process, confined like the program, where a program that means to cheat can pass it.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass

__all__ = ["Opaque", "Check", "convert", "evaluate", "decode", "encode_literal", "program_names"]

MAX_DEPTH = 100
MAX_SEQUENCE = 10 ** 6
_HELPERS = {"set": set, "frozenset": frozenset, "sorted": sorted, "list": list, "tuple": tuple, "dict": dict,
            "len": len, "abs": abs, "round": round, "sum": sum, "min": min, "max": max, "str": str, "int": int,
            "float": float, "bool": bool}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_SEQUENCES = {"l": list, "t": tuple, "S": set, "F": frozenset}


class Opaque:
    """A value the program returned that is not plain data: it equals nothing, itself included."""

    def __init__(self, what: str):
        self.what = what

    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    __hash__ = object.__hash__

    def __repr__(self):
        return f"<{self.what}>"


def decode(data, depth: int = 0):
    """A tagged value from the sandbox (:func:`steadyrl.sandbox.harness_calls.encode`), strictly:
    anything malformed is an :class:`Opaque`."""
    try:
        tag = data[0]
        if depth > MAX_DEPTH or not isinstance(tag, str):
            return Opaque("malformed")
        if tag == "n":
            return None
        if tag == "b" and isinstance(data[1], bool):
            return data[1]
        if tag == "i":
            return int(data[1], 16)
        if tag == "f":
            return float.fromhex(data[1])
        if tag == "c":
            return complex(float.fromhex(data[1]), float.fromhex(data[2]))
        if tag == "s" and isinstance(data[1], str):
            return data[1]
        if tag == "y":
            return bytes.fromhex(data[1])
        if tag in _SEQUENCES and isinstance(data[1], list):
            return _SEQUENCES[tag](decode(x, depth + 1) for x in data[1])
        if tag == "d" and isinstance(data[1], list):
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in data[1]}
        if tag == "?":
            return Opaque(str(data[1])[:100])
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError):
        pass
    return Opaque("malformed")


def encode_literal(value):
    """An argument (a Python literal) as tagged JSON for the sandbox."""
    from ..sandbox.harness_calls import encode

    return encode(value)


@dataclass
class Check:
    """One converted ``assert``: its expression and the program calls it holds, in order."""

    expression: ast.expr
    calls: list  # [(name, args, kwargs)] with literal values


def program_names(source: str) -> set[str]:
    """Names the program binds at top level (a program's own ``sum`` is a call of the program)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _literal(node):
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _is_program_call(node, own: set[str]) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
        node.func.id in own or node.func.id not in _HELPERS)


def _collect(node, own: set[str], calls: list) -> bool:
    """Whether ``node`` is convertible (module docstring); appends the program calls it makes."""
    if _is_program_call(node, own):
        args = [_literal(a) for a in node.args]
        kwargs = {k.arg: _literal(k.value) for k in node.keywords}
        if any(isinstance(a, ast.Starred) for a in node.args) or None in kwargs \
                or not all(ok for ok, _ in args + list(kwargs.values())):
            return False
        calls.append((node.func.id, [v for _, v in args], {k: v for k, (_, v) in kwargs.items()}))
        node.steadyrl_call = len(calls) - 1
        return True
    if isinstance(node, ast.Call):
        helper = isinstance(node.func, ast.Name) or (
            isinstance(node.func, ast.Attribute) and node.func.attr == "isclose"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "math")
        return helper and all(_collect(a, own, calls) for a in node.args) \
            and all(k.arg is not None and _collect(k.value, own, calls) for k in node.keywords)
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(not isinstance(e, ast.Starred) and _collect(e, own, calls) for e in node.elts)
    if isinstance(node, ast.Dict):
        return None not in node.keys and all(_collect(x, own, calls) for x in node.keys + node.values)
    if isinstance(node, ast.Compare):
        return all(type(op) in _COMPARE for op in node.ops) and \
            all(_collect(x, own, calls) for x in [node.left, *node.comparators])
    if isinstance(node, ast.BoolOp):
        return all(_collect(x, own, calls) for x in node.values)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)) and _collect(node.operand, own, calls)
    if isinstance(node, ast.BinOp):
        return type(node.op) in _BINARY and _collect(node.left, own, calls) and _collect(node.right, own, calls)
    if isinstance(node, ast.Subscript):
        return _collect(node.value, own, calls) and _collect(node.slice, own, calls)
    if isinstance(node, ast.Slice):
        return all(x is None or _collect(x, own, calls) for x in (node.lower, node.upper, node.step))
    return False


def convert(statement: str, own: set[str]) -> Check | None:
    """The :class:`Check` of one ``assert`` statement, or ``None`` when it does not convert."""
    try:
        tree = ast.parse(statement)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    calls: list = []
    test = tree.body[0].test
    try:
        ok = _collect(test, own, calls)
    except RecursionError:
        return None
    return Check(test, calls) if ok else None


def _guard(value):
    """Refuse to build a huge sequence out of a returned value (``"x" * f()``)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SEQUENCE:
        raise OverflowError("too large a repeat")
    return value


def _eval(node, values: list):
    if hasattr(node, "steadyrl_call"):
        return values[node.steadyrl_call]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_eval(e, values) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        return {_eval(k, values): _eval(v, values) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Compare):
        left = _eval(node.left, values)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        result = None
        for x in node.values:
            result = _eval(x, values)
            if bool(result) == isinstance(node.op, ast.Or):
                return result
        return result
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values)
        return not operand if isinstance(node.op, ast.Not) else -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, values), _eval(node.right, values)
        if isinstance(node.op, ast.Mult):
            _guard(left), _guard(right)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.Subscript):
        return _eval(node.value, values)[_eval(node.slice, values)]
    if isinstance(node, ast.Slice):
        return slice(*[None if x is None else _eval(x, values) for x in (node.lower, node.upper, node.step)])
    fn = math.isclose if isinstance(node.func, ast.Attribute) else _HELPERS[node.func.id]
    return fn(*[_eval(a, values) for a in node.args], **{k.arg: _eval(k.value, values) for k in node.keywords})


def evaluate(check: Check, values: list) -> bool:
    """Whether the check holds for the values the program's calls returned (decoded); an error
    while evaluating it (a type that does not compare, a set of lists) fails it, as it would
    have failed the ``assert``."""
    if any(isinstance(v, Opaque) for v in values):
        return False
    try:
        return bool(_eval(check.expression, values))
    except Exception:  # noqa: BLE001 - the assert would have raised: it fails
        return False
