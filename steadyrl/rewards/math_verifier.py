"""The ``math`` built-in: answers checked with the ``math-verify`` library (parse, then verify).

Per sample, against the gold answer in the ``answer`` column (option ``answer_key``):

1. gold: ``str(gold)``; if it contains ``gold_marker`` (default ``"####"``, GSM8K's answer line)
   only the text after the last marker is kept. A gold that already holds ``$...$`` or
   ``\\boxed{...}`` is parsed as is; a bare gold (``72``, ``1,234``, ``\\frac{1}{2}``,
   ``2\\sqrt{2}``) is parsed as ``\\boxed{gold}``, which math-verify reads as one LaTeX expression
   (parsed bare, ``2\\sqrt{2}`` would come out as ``2``).
2. completion: parsed with math-verify's default extraction (``\\boxed{}`` first, then LaTeX,
   then a plain expression such as ``The answer is 1,234.``).
3. score: 1.0 if ``verify(gold, prediction)``, 0.0 if not or if no answer was found in the
   completion, and ``None`` when the gold answer is missing or cannot be parsed (a data problem,
   not a wrong completion: the sample is left out rather than punished).

math-verify bounds each parse / verify with ``signal.alarm``, which works only in a process's main
thread; elsewhere (``isolation="thread"``) its own limits are off and only steadyrl's time limit
applies - and a thread cannot be stopped: sympy's big-integer arithmetic holds the interpreter
lock, so ``9^9^9^9`` would stall the whole trainer for minutes. Hence the screen below, in every
isolation. Parsed gold answers are cached across calls (``GOLD_CACHE_SIZE`` of them): a GRPO group
shares its gold, and the function is called one sample at a time.

Screen (:func:`pathological`): before sympy sees a text, it is refused when it holds

* a chain of numeric powers whose exponent exceeds ``MAX_EXPONENT`` (``9^9^9``, ``9**9**9``,
  ``9^{9^{9}}``: the exponent ``9^9`` is 387,420,489), or any exponent literal above it;
* a parenthesised group raised to more than ``MAX_GROUP_EXPONENT`` (``(x+y+1)^{100}`` costs sympy
  seconds to expand);
* a factorial of a literal above ``MAX_FACTORIAL``;
* a ``\boxed{...}`` answer longer than ``MAX_ANSWER_CHARS``, or a completion longer than
  ``MAX_COMPLETION_CHARS``;
* and, read structurally (:mod:`.math_bounds`, one linear pass with an upper bound of each
  operand, symbols bounded by 1): a factorial or binomial of what may exceed ``MAX_FACTORIAL``
  (``(10000000)!``, ``((10000)!)!``, ``(2^{64})!``, ``\binom{10^8}{5\cdot10^7}``), a sum or
  product of more than ``MAX_TERMS`` terms (``\prod_{k=1}^{10^7}k``), a power whose exponent may
  exceed ``MAX_EXPONENT`` or whose value may have more than ``MAX_DIGITS`` digits, groups nested
  deeper than 64.

A refused completion scores 0.0 (not a verifiable answer); a refused gold answer ``None``.
"""

from __future__ import annotations

import math
import re
import threading

from .math_bounds import too_costly
from .registry import RewardFn, register_reward
from .verifiers import gold_column

__all__ = ["math_reward", "parse_gold", "pathological", "MATH_VERIFY_TIMEOUT_S"]

MATH_VERIFY_TIMEOUT_S = 5
"""math-verify's own per-parse / per-verify limit (seconds, an int for ``signal.alarm``): its default."""


GOLD_CACHE_SIZE = 4096
"""Parsed gold answers kept between calls."""

MAX_EXPONENT = 10_000
MAX_GROUP_EXPONENT = 64
MAX_FACTORIAL = 10_000
MAX_TERMS = 10_000
MAX_DIGITS = 100_000
MAX_ANSWER_CHARS = 1_000
MAX_COMPLETION_CHARS = 100_000

# Possessive quantifiers and look-behinds keep every scan linear in the text's length.
_NUM = r"\d++(?:\.\d++)?"
_POW = r"\s*+(?:\^|\*\*)[\s{(\[]*+"
_CHAIN = re.compile(rf"(?<![\d.]){_NUM}(?:{_POW}{_NUM})+")
_EXPONENT = re.compile(r"(?:\^|\*\*)[\s{(\[]*+(\d++)")
_GROUP_POWER = re.compile(r"[)}\]]\s*+(?:\^|\*\*)[\s{(\[]*+(\d++)")
_FACTORIAL = re.compile(r"(?<!\d)(\d++)\s*+!")
_BOXED = re.compile(r"\\boxed\s*{")


def _above(digits: str, limit: int) -> bool:
    digits = digits.lstrip("0") or "0"
    return len(digits) > len(str(limit)) or int(digits) > limit  # no int() of a 5,000-digit string


def _tower_exponent_too_big(chain: str) -> bool:
    """For ``b1 ^ b2 ^ ... ^ bn`` (right-associative): does ``b2 ^ ... ^ bn`` exceed MAX_EXPONENT?"""
    numbers = [float(x) for x in re.findall(_NUM, chain)][1:]
    exponent = numbers[-1]
    for base in reversed(numbers[:-1]):
        if exponent > MAX_EXPONENT or (base > 1 and exponent * math.log10(base) > math.log10(MAX_EXPONENT)):
            return True
        exponent = base ** exponent
    return exponent > MAX_EXPONENT


def _boxed_lengths(text: str):
    """The length of each ``\\boxed{...}``'s content, in one pass over the braces."""
    opens = {m.end() - 1 for m in _BOXED.finditer(text)}
    stack: list[tuple[int, bool]] = []
    for brace in re.finditer(r"[{}]", text):
        i = brace.start()
        if text[i] == "{":
            stack.append((i, i in opens))
        elif stack:
            start, boxed = stack.pop()
            if boxed:
                yield i - start - 1
    yield from (len(text) - start - 1 for start, boxed in stack if boxed)  # never closed


def pathological(text: str) -> str | None:
    """Why ``text`` must not reach sympy (see the module docstring), or ``None`` when it may."""
    if len(text) > MAX_COMPLETION_CHARS:
        return f"longer than {MAX_COMPLETION_CHARS} characters"
    if any(_above(m.group(1), MAX_EXPONENT) for m in _EXPONENT.finditer(text)):
        return f"an exponent above {MAX_EXPONENT}"
    if any(_tower_exponent_too_big(m.group(0)) for m in _CHAIN.finditer(text)):
        return f"a tower of powers whose exponent exceeds {MAX_EXPONENT}"
    if any(_above(m.group(1), MAX_GROUP_EXPONENT) for m in _GROUP_POWER.finditer(text)):
        return f"a parenthesised expression raised to more than {MAX_GROUP_EXPONENT}"
    if any(_above(m.group(1), MAX_FACTORIAL) for m in _FACTORIAL.finditer(text)):
        return f"a factorial of more than {MAX_FACTORIAL}"
    if any(n > MAX_ANSWER_CHARS for n in _boxed_lengths(text)):
        return f"a boxed answer longer than {MAX_ANSWER_CHARS} characters"
    return too_costly(text, max_factorial=MAX_FACTORIAL, max_exponent=MAX_EXPONENT, max_terms=MAX_TERMS,
                      max_digits=MAX_DIGITS)


def _library_timeout() -> int | None:
    return MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def parse_gold(gold, *, gold_marker: str | None = "####") -> list:
    """The parsed gold answer (math-verify's list form); an empty list when it cannot be parsed."""
    from math_verify import parse

    if gold is None:
        return []
    text = str(gold)
    if gold_marker and gold_marker in text:
        text = text.rsplit(gold_marker, 1)[1]
    text = text.strip()
    if not text or pathological(text):
        return []
    if "$" not in text and "\\boxed" not in text:
        text = "\\boxed{" + text + "}"
    return parse(text, parsing_timeout=_library_timeout())


@register_reward("math")
def math_reward(*, answer_key: str = "answer", gold_marker: str | None = "####") -> RewardFn:
    """1.0 / 0.0 by math-verify's equivalence check; ``None`` for an unparseable gold answer."""
    import math_verify  # imported here, once, so forked reward workers inherit it ready

    math_verify.parse("\\boxed{1}", parsing_timeout=_library_timeout())  # warm its parser caches
    parsed_golds: dict[str, list] = {}  # kept between calls (in the worker, with isolation: process)

    def math(prompts: list[str], completions: list[str], **columns) -> list[float | None]:
        golds = gold_column(columns, answer_key, "math")
        timeout = _library_timeout()
        out: list[float | None] = []
        for completion, gold in zip(completions, golds, strict=True):
            key = "" if gold is None else str(gold)
            if key not in parsed_golds:
                if len(parsed_golds) >= GOLD_CACHE_SIZE:
                    parsed_golds.clear()
                parsed_golds[key] = parse_gold(gold, gold_marker=gold_marker)
            target = parsed_golds[key]
            if not target:
                out.append(None)
                continue
            if pathological(completion):
                out.append(0.0)
                continue
            prediction = math_verify.parse(completion, parsing_timeout=timeout)
            ok = bool(prediction) and math_verify.verify(target, prediction, timeout_seconds=timeout)
            out.append(1.0 if ok else 0.0)
        return out

    math.reads_columns = (answer_key,)  # checked against the data before the run starts
    return math
