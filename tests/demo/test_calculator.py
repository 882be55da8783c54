"""The tool demo's calculator: exact arithmetic, and model-written hostile input refused with a reason."""

import pytest

from steadyrl.demo import calculator
from steadyrl.demo.calculator import MAX_EXPRESSION_CHARS, MAX_MAGNITUDE, calculate, evaluate_expression


@pytest.mark.parametrize("expression, result", [
    ("347*29", "10063"), ("(2+3)*4", "20"), ("1/3", "0.333333"), ("-5/2", "-2.5"), ("0.1+0.2", "0.3"),
    (" 7 - 10 ", "-3"), ("2/3*-1", "-0.666667"), ("1/3000000000", "0"), ("+4", "4"),
])
def test_arithmetic_is_exact(expression, result):
    assert calculate(expression) == result


@pytest.mark.parametrize("expression, reason", [
    ("9**9**9**9", "Pow"),
    ("__import__('os')", "Call"),
    ("__import__('os').system('echo hi')", "Call"),
    ("open('/etc/passwd').read()", "Call"),
    ("x", "Name"),
    ("(1).__class__", "Attribute"),
    ("7//2", "FloorDiv"),
    ("7%2", "Mod"),
    ("[1, 2]", "List"),
    ("1 if 1 else 2", "IfExp"),
    ("lambda: 1", "Lambda"),
    ("'a'*3", "only numbers"),
    ("True+1", "only numbers"),
    ("1j*1j", "only numbers"),
    ("1/0", "division by zero"),
    ("1e400", "out of range"),
    ("9" * 20, "out of range"),
    ("999999999*999999999", "out of range"),
    ("1e-300", "out of range"),
    ("", "empty"),
    ("1 +", "not an arithmetic expression"),
    ("\x00", "not an arithmetic expression"),
])
def test_hostile_or_invalid_input_is_refused_with_a_reason(expression, reason):
    with pytest.raises(ValueError, match=reason):
        calculate(expression)


def test_huge_intermediate_results_are_refused_before_they_grow(monkeypatch):
    expression = "*".join(["99999"] * 16)  # under the length limit; the product would have ~80 digits
    assert len(expression) <= MAX_EXPRESSION_CHARS
    checked = []
    bounded = calculator._bounded
    monkeypatch.setattr(calculator, "_bounded", lambda value: (checked.append(value), bounded(value))[1])
    with pytest.raises(ValueError, match="out of range"):
        calculate(expression)
    # refused at the first product past the bound: nothing bigger than one step past it was ever built
    assert max(abs(v) for v in checked) <= MAX_MAGNITUDE * 99999 and len(checked) < 16 + 15
    assert evaluate_expression(str(MAX_MAGNITUDE)) == MAX_MAGNITUDE


def test_long_and_deeply_nested_strings_are_refused_before_parsing():
    for expression in ["1+" * 5000 + "1", "(" * 100000 + "1" + ")" * 100000]:
        with pytest.raises(ValueError, match="too long"):
            calculate(expression)


def test_non_string_arguments_are_refused():
    for value in (5, None, ["1+1"], {"expression": "1"}):
        with pytest.raises(ValueError, match="must be a string"):
            calculate(value)
