"""The cases the local sandbox runs for one sample of the ``code`` reward, and how its results are
judged: ``stdio`` tests are inputs; ``call`` tests and the converted ``assert`` tests
(:mod:`.code_asserts`) are calls whose values come back as plain data and are compared here; an
``assert`` that does not convert is one statement run in the program's process."""

from __future__ import annotations

import json

from .code_asserts import Check, Opaque, convert, decode, encode_literal, evaluate, program_names
from .code_tests import Tests

__all__ = ["job_cases", "judge_assert", "failure", "as_json"]


def job_cases(program: str, tests: Tests) -> tuple[list, list]:
    """``(cases, checks)``: the harness's cases, and per ``assert`` test ``(Check or None, the
    indices of its cases)`` (empty for the other formats)."""
    if tests.mode == "stdio":
        return list(tests.cases), []
    if tests.mode == "call":
        return [{"fn": tests.fn_name, "args": [encode_literal(a) for a in args]} for args in tests.cases], []
    own = program_names(program)
    cases, checks = [], []
    for statement in tests.cases:
        check = convert(statement, own)
        if check is None:
            checks.append((None, [len(cases)]))
            cases.append({"exec": statement})
            continue
        try:
            calls = [{"fn": name, "args": [encode_literal(a) for a in args],
                      "kwargs": {k: encode_literal(v) for k, v in kwargs.items()}} for name, args, kwargs in check.calls]
        except RecursionError:
            checks.append((None, [len(cases)]))
            cases.append({"exec": statement})
            continue
        checks.append((check, list(range(len(cases), len(cases) + len(calls)))))
        cases += calls
    return cases, checks


def failure(result) -> str:
    """The reason of a result whose status is not ``ok``."""
    status = result.get("status") if isinstance(result, dict) else None
    error = str(result.get("error", "")) if isinstance(result, dict) else ""
    if status == "runtime_error" and "SyntaxError" in error:
        return "syntax_error"
    return status if isinstance(status, str) and status else "sandbox_error"


def judge_assert(check: Check | None, results: list) -> str | None:
    """``None`` when the ``assert`` test passed, else why: the first failing call's reason, or
    ``wrong_answer`` when the check is false on the values."""
    for result in results:
        if not isinstance(result, dict) or result.get("status") != "ok":
            return failure(result)
    if check is None:  # run in the program's process; its own report
        return None
    values = [decode(r["value"]) if "value" in r else Opaque("no value") for r in results]
    return None if evaluate(check, values) else "wrong_answer"


def as_json(value):
    """A returned value as JSON data (what ``call`` tests' outputs are): a tuple is a list, a
    dict's keys are texts as JSON makes them; a value JSON cannot hold is an :class:`Opaque`."""
    try:
        return json.loads(json.dumps(value, default=_not_json), parse_constant=float)
    except (TypeError, ValueError, RecursionError):
        return Opaque("not JSON")


def _not_json(value):
    raise TypeError(f"{type(value).__name__} is not JSON data")
