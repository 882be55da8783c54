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
applies. Parsed gold answers are cached within a call (a GRPO group shares its gold).
"""

from __future__ import annotations

import threading

from .registry import RewardFn, register_reward
from .verifiers import _gold_column

__all__ = ["math_reward", "parse_gold", "MATH_VERIFY_TIMEOUT_S"]

MATH_VERIFY_TIMEOUT_S = 5
"""math-verify's own per-parse / per-verify limit (seconds, an int for ``signal.alarm``): its default."""


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
    if not text:
        return []
    if "$" not in text and "\\boxed" not in text:
        text = "\\boxed{" + text + "}"
    return parse(text, parsing_timeout=_library_timeout())


@register_reward("math")
def math_reward(*, answer_key: str = "answer", gold_marker: str | None = "####") -> RewardFn:
    """1.0 / 0.0 by math-verify's equivalence check; ``None`` for an unparseable gold answer."""
    import math_verify  # imported here, once, so forked reward workers inherit it ready

    math_verify.parse("\\boxed{1}", parsing_timeout=_library_timeout())  # warm its parser caches

    def math(prompts: list[str], completions: list[str], **columns) -> list[float | None]:
        golds = _gold_column(columns, answer_key, "math")
        timeout = _library_timeout()
        parsed_golds: dict[str, list] = {}
        out: list[float | None] = []
        for completion, gold in zip(completions, golds, strict=True):
            key = "" if gold is None else str(gold)
            if key not in parsed_golds:
                parsed_golds[key] = parse_gold(gold, gold_marker=gold_marker)
            target = parsed_golds[key]
            if not target:
                out.append(None)
                continue
            prediction = math_verify.parse(completion, parsing_timeout=timeout)
            ok = bool(prediction) and math_verify.verify(target, prediction, timeout_seconds=timeout)
            out.append(1.0 if ok else 0.0)
        return out

    math.reads_columns = (answer_key,)  # checked against the data before the run starts
    return math
