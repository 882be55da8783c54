"""A structural, linear-time bound on what sympy would compute from a text (the ``math`` reward's
screen, :func:`steadyrl.rewards.math_verifier.pathological`).

:func:`too_costly` reads the whole text once, as math: numbers, letters (each a symbol, bounded by
1, so ``x^0 \\cdot 10^8`` is no way round), groups (``( )``, ``{ }``, ``[ ]``), ``+ - * /``,
``\\cdot \\times \\div``, ``^``, ``!``, ``\\frac``, ``\\sqrt``, ``\\binom`` / ``\\choose``,
``\\sum`` / ``\\prod`` with their limits; any other character ends one expression and starts the
next (prose between formulas is many small expressions). Each expression gets an upper bound of
``log10 |value|`` (a literal ``m`` counts as ``max(m, 1/m)``, so a division cannot hide a big
number), and the text is refused (a reason is returned) when an operand cannot be proved small:

* a factorial whose operand may exceed ``max_factorial`` (``(10000000)!``, ``((10000)!)!``,
  ``(2^{64})!``), or more than two ``!`` in a row;
* a binomial whose top may exceed ``max_factorial`` (``\\binom{10^8}{5\\cdot10^7}``);
* a sum or product of more than ``max_terms`` terms (``\\prod_{k=1}^{10^7}k``);
* a power whose exponent may exceed ``max_exponent`` or whose value may have more than
  ``max_digits`` digits;
* groups nested deeper than ``MAX_DEPTH``.

Every character is read once and every group's bound computed once: linear in the text.
"""

from __future__ import annotations

import math

__all__ = ["too_costly", "MAX_DEPTH"]

MAX_DEPTH = 64
"""Deeper nesting of groups is refused (no answer needs it; the parser recurses once per level)."""
_OPEN, _CLOSE = "({[", ")}]"
_MUL_COMMANDS = {"cdot", "times", "div", "ast"}
_IGNORED = {"left", "right", "big", "Big", "bigg", "Bigg", "displaystyle", "limits", "!", ",", ";", ":", " "}
_BINOM = {"binom", "dbinom", "tbinom"}
_FRAC = {"frac", "dfrac", "tfrac", "cfrac"}
_LOG2 = math.log10(2)
_TRIGGERS = ("!", "^", "**", "\\binom", "\\dbinom", "\\tbinom", "\\choose", "\\sum", "\\prod", "(" * MAX_DEPTH)
_END = "\0"
"""What :meth:`_Reader.peek` sees past the end (in no set of characters, unlike ``""``)."""


class _Refused(Exception):
    pass


class _Reader:
    def __init__(self, text: str, limits: dict):
        self.text, self.i, self.n, self.depth, self.limits = text, 0, len(text), 0, limits

    def peek(self) -> str:
        return self.text[self.i] if self.i < self.n else _END

    def skip_spaces(self) -> None:
        while self.i < self.n and self.text[self.i].isspace():
            self.i += 1

    def command(self) -> str:
        """The name of the ``\\command`` at the reader (consumed), ``""`` if there is none."""
        if self.peek() != "\\":
            return ""
        j = self.i + 1
        if j < self.n and not self.text[j].isalpha():
            self.i = j + 1
            return self.text[j]
        while j < self.n and self.text[j].isalpha():
            j += 1
        name, self.i = self.text[self.i + 1:j], j
        return name

    # --- the grammar: sequence > sum > product > power > atom ---------------------------------

    def sequence(self, closer: str) -> float:
        """Expressions up to ``closer`` (or the end); the largest bound among them."""
        best = 0.0
        while self.i < self.n and self.peek() != closer:
            start = self.i
            best = max(best, self.sum())
            if self.i == start:  # a character that starts no expression: a separator
                if self.peek() in _CLOSE:
                    if closer:
                        return best
                self.i += 1
        return best

    def sum(self) -> float:
        bound = self.product()
        while True:
            self.skip_spaces()
            if self.peek() in "+-":
                self.i += 1
                bound = max(bound, self.product()) + _LOG2
            else:
                return bound

    def product(self) -> float:
        bound = self.power()
        while True:
            self.skip_spaces()
            start = self.i
            if self.peek() in "*/":
                self.i += 1
            elif self.peek() == "\\":
                name = self.command()
                if name == "choose":
                    top = bound
                    bound = self._binom(top, self.power())
                    continue
                if name not in _MUL_COMMANDS:
                    self.i = start
            if not self._starts_atom():
                self.i = start
                return bound
            before = self.i
            bound += self.power()  # implicit or explicit product (or quotient: literals count both ways)
            if self.i == before:  # nothing read: not a factor after all
                return bound

    def _starts_atom(self) -> bool:
        self.skip_spaces()
        c = self.peek()
        if c == "\\":
            j = self.i + 1
            name_end = j
            while name_end < self.n and self.text[name_end].isalpha():
                name_end += 1
            return self.text[j:name_end] not in ("choose",) and name_end > j
        return c.isalnum() or c in _OPEN or (c == "." and self.text[self.i + 1:self.i + 2].isdigit())

    def power(self) -> float:
        base = self.postfix(self.atom())
        self.skip_spaces()
        if self.peek() == "^" or self.text.startswith("**", self.i):
            self.i += 2 if self.peek() == "*" else 1
            exponent = self.postfix(self.atom())
            if exponent > math.log10(self.limits["max_exponent"]):
                raise _Refused(f"a power whose exponent may exceed {self.limits['max_exponent']}")
            digits = max(base, 0.0) * 10 ** exponent
            if digits > self.limits["max_digits"]:
                raise _Refused(f"a power that may have more than {self.limits['max_digits']} digits")
            return digits
        return base

    def postfix(self, bound: float) -> float:
        bangs = 0
        while True:
            self.skip_spaces()
            if self.peek() != "!":
                return bound
            self.i += 1
            bangs += 1
            if bangs > 2:
                raise _Refused("more than two factorials in a row")
            bound = self._factorial(bound)

    def _factorial(self, bound: float) -> float:
        if bound > math.log10(self.limits["max_factorial"]):
            raise _Refused(f"a factorial of what may exceed {self.limits['max_factorial']}")
        n = 10 ** bound
        return n * math.log10(max(n, 2.0))

    def _binom(self, top: float, _bottom: float) -> float:
        if top > math.log10(self.limits["max_factorial"]):
            raise _Refused(f"a binomial of what may exceed {self.limits['max_factorial']}")
        return 10 ** top * _LOG2

    def group(self) -> float:
        """The bracketed group at the reader (its opening bracket consumed here)."""
        opener = self.text[self.i]
        self.i += 1
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Refused(f"groups nested deeper than {MAX_DEPTH}")
        bound = self.sequence(_CLOSE[_OPEN.index(opener)])
        if self.peek() in _CLOSE:
            self.i += 1
        self.depth -= 1
        return bound

    def argument(self) -> float:
        self.skip_spaces()
        if self.peek() in _OPEN:
            return self.group()
        return self.atom()

    def number(self) -> float:
        j = self.i
        while j < self.n and self.text[j].isdigit():
            j += 1
        while (self.text[j:j + 1] == "," and self.text[j + 1:j + 4].isdigit() and len(self.text[j + 1:j + 4]) == 3
               and not self.text[j + 4:j + 5].isdigit()):
            j += 4  # 1,000,000: one number, as a parser that drops thousands separators reads it
        whole = self.text[self.i:j].replace(",", "").lstrip("0")
        frac = ""
        if j + 1 < self.n and self.text[j] == "." and self.text[j + 1].isdigit():
            k = j + 1
            while k < self.n and self.text[k].isdigit():
                k += 1
            frac, j = self.text[j + 1:k], k
        self.i = j
        if whole:
            return math.log10(float(whole)) if len(whole) < 300 else float(len(whole))
        zeros = len(frac) - len(frac.lstrip("0"))
        return float(zeros + 1) if frac.strip("0") else 0.0  # 0.001 counts as 1000

    def atom(self) -> float:
        self.skip_spaces()
        while self.peek() in ("+", "-"):  # signs (a loop: no recursion for ------1)
            self.i += 1
            self.skip_spaces()
        c = self.peek()
        if c == _END:
            return 0.0
        if c.isdigit() or (c == "." and self.text[self.i + 1:self.i + 2].isdigit()):
            return self.number()
        if c.isalpha():
            self.i += 1
            return 0.0  # a symbol: bounded by 1 (x^0, x/x cannot hide a literal)
        if c in _OPEN:
            return self.group()
        if c == "\\":
            return self._command_atom()
        return 0.0

    def _command_atom(self) -> float:
        start = self.i
        name = self.command()
        if name in _FRAC:
            return self.argument() + self.argument()
        if name in _BINOM:
            return self._binom(self.argument(), self.argument())
        if name == "sqrt":
            self.skip_spaces()
            if self.peek() == "[":
                self.group()
            return self.argument() / 2
        if name in ("sum", "prod"):
            return self._series(name)
        if name in _IGNORED or name in _MUL_COMMANDS or name == "choose":
            if self.i == start:
                self.i += 1
            return 0.0
        return 0.0  # \pi, \sin, \infty ...: bounded by 1; a function's argument is the next factor

    def _series(self, name: str) -> float:
        """``\\sum_{lo}^{hi} body`` / ``\\prod``: at most ``max_terms`` terms."""
        low = high = 0.0
        for _ in range(2):
            self.skip_spaces()
            if self.peek() == "_":
                self.i += 1
                low = self.argument()
            elif self.peek() == "^":
                self.i += 1
                high = self.argument()
        terms = math.log10(10 ** min(high, 300) + 10 ** min(low, 300))
        if terms > math.log10(self.limits["max_terms"]):
            raise _Refused(f"a {name} of more than {self.limits['max_terms']} terms")
        body = self.power()
        return terms + body if name == "sum" else 10 ** terms * max(body, 0.0)


def too_costly(text: str, *, max_factorial: int, max_exponent: int, max_terms: int, max_digits: int) -> str | None:
    """Why sympy must not evaluate ``text`` (the module docstring's list), or ``None``."""
    if not any(mark in text for mark in _TRIGGERS):
        return None  # nothing that can be refused: no need to read it
    reader = _Reader(text, {"max_factorial": max_factorial, "max_exponent": max_exponent,
                            "max_terms": max_terms, "max_digits": max_digits})
    try:
        reader.sequence("")
    except _Refused as why:
        return str(why)
    except OverflowError:
        return "a value too large to bound"
    return None
