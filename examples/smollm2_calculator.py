"""The multi-turn task of examples/smollm2_tools.yaml: SmolLM2-135M-Instruct, with its own ChatML
template, may ask a calculator before it answers a product.

    python examples/smollm2_calculator.py data/     # writes the prompts (no download)

SmolLM2's template has no tool support (it ignores ``tools=``), so the calculator is an
environment, not a ``rollout.multi_turn.tools`` function. A turn that says "The answer is N" ends the episode,
with reward 1.0 when N is the product, else 0.0. Any other turn is a request to the calculator: the
expression of its line ``calculate: EXPRESSION``, or else the first ``a * b``-like expression it
writes (the model, 135M parameters, often writes "41 * 86 = 342" instead of the call), is evaluated
by the demo's calculator (:func:`steadyrl.demo.calculator.evaluate_expression`) and the result comes
back as a user message (``result: 3526``); a turn with neither gets a reminder of the two forms.
"""

import json
import random
import re
import sys
from pathlib import Path

from steadyrl.demo.calculator import evaluate_expression

CALL = re.compile(r"^\s*calculate:\s*(.+?)\s*$", re.MULTILINE | re.IGNORECASE)
EXPRESSION = re.compile(r"\d+(?:\.\d+)?(?:\s*[-+*/]\s*\d+(?:\.\d+)?)+")
REMINDER = "Write `calculate: EXPRESSION` to use the calculator, or reply: The answer is N."
ANSWER = re.compile(r"The answer is\s*(-?[\d,]+)", re.IGNORECASE)
INSTRUCTION = ("What is {a} * {b}? Use the calculator: reply with one line `calculate: {a} * {b}` and wait "
               "for the result. Then reply: The answer is N.")
NUM_TRAIN, NUM_TEST, SEED = 2000, 64, 0


class Calculator:
    """One episode: calculator calls until the policy answers (or rollout.multi_turn.max_turns)."""

    def reset(self, prompt, answer, **row):
        self.answer = str(answer)
        return None  # the row's prompt starts the episode

    def step(self, text):
        said = ANSWER.findall(text)
        if said:
            return None, 1.0 if said[-1].replace(",", "") == self.answer else 0.0, True
        found = CALL.search(text) or EXPRESSION.search(text)
        if found is None:
            return REMINDER, None, False
        try:
            result = evaluate_expression(found.group(found.lastindex or 0).strip("` "))
        except ValueError as exc:  # the model writes anything: the error is its observation
            result = f"error: {exc}"
        return f"result: {result}", None, False


def main(out_dir: str) -> None:
    rng = random.Random(SEED)
    pairs = {(rng.randint(11, 99), rng.randint(11, 99)) for _ in range(3 * (NUM_TRAIN + NUM_TEST))}
    pairs = sorted(pairs)
    rng.shuffle(pairs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, chosen in (("test", pairs[:NUM_TEST]), ("train", pairs[NUM_TEST:NUM_TEST + NUM_TRAIN])):
        path = out / f"smollm2_calc_{split}.jsonl"
        with open(path, "w") as f:
            for a, b in chosen:
                prompt = [{"role": "user", "content": INSTRUCTION.format(a=a, b=b)}]
                f.write(json.dumps({"prompt": prompt, "answer": str(a * b)}) + "\n")
        print(f"wrote {path} ({len(chosen)} prompts)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data")
