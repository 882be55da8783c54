"""The ``math`` reward's structural stall screen (:mod:`steadyrl.rewards.math_bounds`): a factorial,
binomial, sum, product or power whose operands cannot be proved small is refused, wherever the
big number hides (a group, a power, a ``\\cdot``, a symbol raised to 0); ordinary answers still
verify; the reading is linear in the text (counted in characters read, not timed)."""

from __future__ import annotations

import pytest

from steadyrl.rewards import math_bounds
from steadyrl.rewards.math_verifier import pathological

STALLS = {  # each cost 6-9 s of sympy before (issue 30, item 4)
    "factorial_of_a_group": r"\boxed{(10000000)!}",
    "factorial_of_a_factorial": r"\boxed{((10000)!)!}",
    "factorial_of_a_power": r"\boxed{(2^{64})!}",
    "binomial_of_powers": r"\boxed{\binom{10^8}{5\cdot10^7}}",
    "product_of_ten_million_terms": r"\boxed{\prod_{k=1}^{10^7}k}",
    "sum_of_a_hundred_million_terms": r"\boxed{\sum_{k=1}^{10^8} k^2}",
    "symbol_to_the_zero_hides_nothing": r"\boxed{(x^0\cdot 10^8)!}",
    "choose": r"\boxed{{10^8 \choose 5}}",
    "left_right_group": r"\boxed{\left(10^{8}\right)!}",
    "power_of_a_group_to_a_group": r"\boxed{(2^{64})^{(2^{64})}}",
    "thousands_separators": r"\boxed{1,000,000!}",
    "double_bang_is_two_factorials": r"\boxed{10!!}",  # math-verify reads 10!! as (10!)!
    "three_bangs": r"\boxed{3!!!}",
    "dfrac_inside": r"\boxed{\left(\dfrac{10^{9}}{3}\right)!}",
}

ORDINARY = [r"\boxed{5!}", r"\boxed{\binom{10}{3}}", r"\boxed{2^{10}}", r"The answer is $\frac{1}{2}$.",
            r"\boxed{(n-1)!}", r"\boxed{\sum_{k=1}^{n} k}", r"\boxed{\sqrt{2}}", r"\boxed{3.14159}",
            r"\boxed{\dfrac{(2n)!}{n!^2}}", "So we have 1,234 apples! Wow! \\boxed{1234}", r"\boxed{\prod_{k=1}^{10}k}",
            r"\boxed{e^{i\pi}}", r"\boxed{9^{9999}}", r"$x^2 - 3x + 2 = 0$, so \boxed{x = 1, 2}",
            r"\boxed{\left[ -1, \infty \right)}", r"\boxed{1000!}", r"\boxed{5!!}"]


@pytest.mark.parametrize("name", sorted(STALLS))
def test_a_costly_operand_is_refused_wherever_it_hides(name):
    assert pathological(STALLS[name]) is not None


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_answers_pass_the_screen(text):
    assert pathological(text) is None


def test_ordinary_answers_still_verify_and_the_stalls_score_zero():
    pytest.importorskip("math_verify")
    from steadyrl.rewards import load_reward

    fn = load_reward("math")
    answers = [r"\boxed{120}", r"\boxed{120}", r"\boxed{1024}", "7"]
    completions = [r"\boxed{5!}", r"\boxed{\binom{10}{3}}", r"\boxed{2^{10}}", r"\boxed{(10000000)!}"]
    assert fn([""] * 4, completions, answer=answers) == [1.0, 1.0, 1.0, 0.0]


def test_deep_nesting_is_refused_before_it_recurses():
    assert pathological("(" * 100 + "1" + ")" * 100 + "!") is not None


@pytest.mark.parametrize("unit", ["1+", "x!", "(1)", "\\frac{1}{2}", "2^{3}", "\\sqrt{", "{", "-"])
def test_reading_is_linear_in_the_text(unit, monkeypatch):
    """Characters the reader looks at, per character of text: the same at 1,000 and 20,000 units."""
    looked = []
    real_peek = math_bounds._Reader.peek

    def counting_peek(self):
        looked.append(1)
        return real_peek(self)

    monkeypatch.setattr(math_bounds._Reader, "peek", counting_peek)
    per_char = []
    for n in (1_000, 20_000):
        looked.clear()
        text = unit * n + "!"
        math_bounds.too_costly(text, max_factorial=10_000, max_exponent=10_000, max_terms=10_000, max_digits=100_000)
        per_char.append(len(looked) / len(text))
    assert per_char[1] <= per_char[0] * 1.1 + 0.01
