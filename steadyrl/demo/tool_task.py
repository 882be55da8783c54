"""The multi-turn demo task: multiply two numbers, with a calculator the policy may call.

A prompt is one user message; the answer is the exact product::

    {"prompt": [{"role": "user", "content": "What is 347*29?"}], "answer": "10063"}

The factors are drawn uniformly from ``a_digits``-digit and ``b_digits``-digit numbers whose
product has ``a_digits + b_digits`` digits (so every transcript has one shape: the model copies
digits at fixed offsets); a pair already drawn, or with a shorter product, is redrawn, so the
training and held-out splits never share a question, and both depend only on ``seed``. A tiny
model cannot multiply a 3-digit by a 2-digit number in its head; it can copy the factors into a
call of :func:`~steadyrl.demo.calculator.calculate` and copy the result back. Two kinds of
transcript teach it the format in the supervised warm start:

* direct: the assistant answers at once (right answer, which it cannot reproduce);
* tool: the assistant calls the calculator in the Hermes format, reads the ``tool`` message and
  answers with the result.

The reward is 1.0 when the episode's final answer (the policy's last turn, :func:`episode_answer`)
is exactly the product, else 0.0.
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
    "episode_answer",
    "tool_answer_reward",
    "format_transcript",
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
    smallest = 10 ** (a_digits + b_digits - 1)  # the product has a_digits + b_digits digits
    space = sum(b_range[1] - max(b_range[0], -(-smallest // a)) + 1 for a in range(a_range[0], a_range[1] + 1)
                if a * b_range[1] >= smallest)
    wanted = n_train + n_eval
    if 2 * wanted > space:
        raise ValueError(f"n_train + n_eval = {wanted} is too many distinct questions for {a_digits}-digit "
                         f"times {b_digits}-digit numbers ({space}); use fewer records or more digits")
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    records = []
    while len(records) < wanted:
        pair = (rng.randint(*a_range), rng.randint(*b_range))
        if pair[0] * pair[1] >= smallest and pair not in seen:
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


def episode_answer(turns: list[dict]) -> str:
    """The final answer of an episode given as its turn list (the messages after the prompt): the
    last message's text when the policy wrote it, else ``""`` (an episode cut after a tool result)."""
    if not turns or turns[-1].get("role") != "assistant":
        return ""
    return str(turns[-1].get("content") or "").strip()


def tool_answer_reward(prompts: list, completions: list[str], answer: list[str], turns: list | None = None,
                       **kwargs) -> list[float]:
    """1.0 where the episode's final answer equals ``answer``, else 0.0.

    The final answer is :func:`episode_answer` of ``turns`` when the trainer passes the episodes'
    turn lists, else :func:`final_answer` of the completion.
    """
    if not len(prompts) == len(completions) == len(answer):
        raise ValueError(f"prompts, completions and answer must have one length, got "
                         f"{len(prompts)}, {len(completions)}, {len(answer)}")
    finals = ([episode_answer(t) for t in turns] if turns is not None else [final_answer(c) for c in completions])
    return [1.0 if f == str(a).strip() else 0.0 for f, a in zip(finals, answer)]


def format_transcript(prompt: list[dict] | str, turns: list[dict]) -> str:
    """A transcript for people: one ``role: text`` block per message, prompt first."""
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    lines = []
    for m in [*messages, *turns]:
        role = m.get("role", "?") + (f" ({m['name']})" if m.get("role") == "tool" and m.get("name") else "")
        text = " ".join(filter(None, [str(m.get("content") or "").strip(), *_calls(m)])).replace("\n", "\n    ")
        lines.append(f"  {role}: {text}")
    return "\n".join(lines)


def _calls(message: dict) -> list[str]:
    """An assistant message's tool calls as ``name(arguments)`` (an agent's call has no text of its own)."""
    import json

    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments", "")
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        out.append(f"[call] {fn.get('name', '?')}({args})")
    return out
