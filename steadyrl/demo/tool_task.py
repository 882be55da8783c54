"""The multi-turn demo task: multiply two numbers, with a calculator the policy may call.

A prompt is one user message; the answer is the exact product::

    {"prompt": [{"role": "user", "content": "What is 347*29?"}], "answer": "10063"}

The factors are drawn uniformly from ``a_digits``-digit and ``b_digits``-digit numbers; a pair
already drawn is redrawn, so the training and held-out splits never share a question, and both
depend only on ``seed``. A tiny model cannot multiply a 3-digit by a 2-digit number in its head;
it can copy the factors into a call of :func:`~steadyrl.demo.calculator.calculate` and copy the
result back. Two kinds of transcript teach it the format in the supervised warm start:

* direct: the assistant answers at once (right answer, which it cannot reproduce);
* tool: the assistant calls the calculator in the Hermes format, reads the ``tool`` message and
  answers with the result.

The reward is 1.0 when the episode's final answer (:func:`final_answer`: the last line of the
completion) is exactly the product, else 0.0.
"""

from __future__ import annotations

import json
import random

__all__ = [
    "TOOL_NAME",
    "question",
    "make_tool_splits",
    "direct_transcript",
    "tool_transcript",
    "tool_call_text",
    "warmstart_transcripts",
    "final_answer",
    "tool_answer_reward",
]

TOOL_NAME = "calculate"
"""The name the demo's tool is called by (:func:`steadyrl.demo.calculator.calculate`)."""


def question(a: int, b: int) -> list[dict]:
    """The chat-format prompt asking for ``a*b``."""
    return [{"role": "user", "content": f"What is {a}*{b}?"}]


def make_tool_splits(n_train: int, n_eval: int, *, a_digits: int = 3, b_digits: int = 2,
                     seed: int = 0) -> tuple[list[dict], list[dict]]:
    """``(train, held_out)`` records ``{"prompt", "answer", "a", "b"}``; no question is in both.

    Deterministic for a given ``seed`` and arguments.
    """
    if a_digits < 1 or b_digits < 1:
        raise ValueError(f"a_digits and b_digits must be >= 1, got {a_digits} and {b_digits}")
    if n_train < 0 or n_eval < 0:
        raise ValueError(f"n_train and n_eval must be >= 0, got {n_train} and {n_eval}")
    a_range = (10 ** (a_digits - 1), 10**a_digits - 1)
    b_range = (10 ** (b_digits - 1), 10**b_digits - 1)
    space = (a_range[1] - a_range[0] + 1) * (b_range[1] - b_range[0] + 1)
    wanted = n_train + n_eval
    if 2 * wanted > space:
        raise ValueError(f"n_train + n_eval = {wanted} is too many distinct questions for {a_digits}-digit "
                         f"times {b_digits}-digit numbers ({space}); use fewer records or more digits")
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    records = []
    while len(records) < wanted:
        pair = (rng.randint(*a_range), rng.randint(*b_range))
        if pair not in seen:
            seen.add(pair)
            records.append({"prompt": question(*pair), "answer": str(pair[0] * pair[1]),
                            "a": pair[0], "b": pair[1]})
    return records[:n_train], records[n_train:]


def tool_call_text(expression: str) -> str:
    """An assistant turn calling the calculator, in the Hermes format the ``hermes`` parser reads."""
    call = {"name": TOOL_NAME, "arguments": {"expression": expression}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def direct_transcript(record: dict) -> list[dict]:
    """The prompt and an assistant turn that answers at once."""
    return [*record["prompt"], {"role": "assistant", "content": record["answer"]}]


def tool_transcript(record: dict) -> list[dict]:
    """The prompt, a calculator call, its result as a ``tool`` message, and the answer."""
    from .calculator import calculate

    expression = f"{record['a']}*{record['b']}"
    result = calculate(expression)
    return [
        *record["prompt"],
        {"role": "assistant", "content": tool_call_text(expression)},
        {"role": "tool", "name": TOOL_NAME, "content": result},
        {"role": "assistant", "content": result},
    ]


def warmstart_transcripts(records: list[dict], tool_fraction: float, *, seed: int = 0) -> list[list[dict]]:
    """One transcript per record: a tool transcript for a ``tool_fraction`` of them (chosen with
    ``seed``), a direct one for the rest."""
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"tool_fraction must be in [0, 1], got {tool_fraction}")
    rng = random.Random(seed)
    return [tool_transcript(r) if rng.random() < tool_fraction else direct_transcript(r) for r in records]


def final_answer(completion: str) -> str:
    """The episode's final answer: the last non-empty line of the completion, stripped.

    An episode ends with the policy's answer turn, so its last line is the policy's; an episode
    cut while calling the tool ends with ``</tool_call>``, which is no number.
    """
    lines = [line.strip() for line in completion.strip().splitlines()]
    return lines[-1] if lines else ""


def tool_answer_reward(prompts: list, completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 where :func:`final_answer` of the completion equals ``answer``, else 0.0."""
    if not len(prompts) == len(completions) == len(answer):
        raise ValueError(f"prompts, completions and answer must have one length, got "
                         f"{len(prompts)}, {len(completions)}, {len(answer)}")
    return [1.0 if final_answer(c) == str(a).strip() else 0.0 for c, a in zip(completions, answer)]
