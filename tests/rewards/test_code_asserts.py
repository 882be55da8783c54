"""Which ``assert`` statements the ``code`` reward turns into calls judged outside the program, how
the checks are evaluated on the returned values, and how strictly those values are decoded."""

from __future__ import annotations

import pytest

from steadyrl.rewards.code_asserts import Opaque, convert, decode, evaluate, program_names
from steadyrl.sandbox.harness_calls import encode


@pytest.mark.parametrize("statement, calls", [
    ("assert f(1, 2) == 3", [("f", [1, 2], {})]),
    ("assert f((1, 2), key={'a': None}) == (2, 1)", [("f", [(1, 2)], {"key": {"a": None}})]),
    ("assert set(f('ab')) == {'a', 'b'}", [("f", ["ab"], {})]),
    ("assert math.isclose(f(2), 0.5, rel_tol=1e-3)", [("f", [2], {})]),
    ("assert f(1) + f(2) == 3 and not g()", [("f", [1], {}), ("f", [2], {}), ("g", [], {})]),
    ("assert f(3)[1:] == [2], 'a message'", [("f", [3], {})]),
])
def test_plain_calls_with_literal_arguments_convert(statement, calls):
    check = convert(statement, set())
    assert check is not None and check.calls == calls


@pytest.mark.parametrize("statement", [
    "assert Solution().f(2) == 4",            # a method call
    "assert f(helper) == 4",                  # a name from the setup
    "assert f(lambda x: x) == 4",
    "assert f(f(1)) == 4",                    # a call of the program inside another's arguments
    "assert f(*args) == 4",
    "assert isinstance(f(1), int)",           # a builtin that is not a helper: the program's call, not literal
    "x = 1",                                  # not an assert
])
def test_what_does_not_convert_runs_confined(statement):
    assert convert(statement, set()) is None


def test_a_helper_name_the_program_defines_is_the_programs_call():
    assert convert("assert sum(3) == 6", {"sum"}).calls == [("sum", [3], {})]
    assert convert("assert sum([1, 2]) == 3", set()).calls == []
    assert program_names("import os.path as p\ndef sum(x): pass\nclass A: pass\nN = M = 2") == {"p", "sum", "A", "N", "M"}


def test_checks_compare_like_python_on_plain_values():
    check = convert("assert f(1) == (1, 2)", set())
    assert evaluate(check, [(1, 2)]) and not evaluate(check, [[1, 2]])  # a tuple is not a list
    assert evaluate(convert("assert f(1) == 3", set()), [3.0])  # as the assert would
    assert not evaluate(convert("assert sorted(f(1)) == [1]", set()), [[1, "a"]])  # an error fails it
    assert not evaluate(convert("assert f(1) * 'x' == ''", set()), [10 ** 9])  # no huge repeat


@pytest.mark.parametrize("value", [0, -7, 2 ** 200, 1.5, float("inf"), 1j, True, None, "é\ud800", b"\x00",
                                   [1, (2, {3})], frozenset({1}), {1: [2], "a": (None,)}])
def test_plain_values_round_trip_with_their_types(value):
    back = decode(encode(value))
    assert back == value and type(back) is type(value)


def test_foreign_or_malformed_values_equal_nothing():
    class Int(int):
        def __eq__(self, other):
            return True

    assert isinstance(decode(encode(Int(3))), Opaque)
    for bad in (["i", "zz"], ["b", 1], ["l", 5], ["S", [["l", []]]], ["q"], [], "x", None, ["d", [[["l", []], ["n"]]]]):
        assert isinstance(decode(bad), Opaque), bad
    assert Opaque("x") != Opaque("x") and not evaluate(convert("assert f() == 1", set()), [Opaque("x")])
