"""Write the task of examples/smollm2_grpo.yaml: "Which number is larger, 17 or 8?", answered in a
fixed form, "The answer is 17."

    python examples/prepare_smollm2_larger.py data/      # no download: the prompts are generated

Pairs of distinct numbers in 1..MAX_NUMBER, in both orders; a fixed, seeded set of NUM_TEST
unordered pairs is held out (data/smollm2_larger_test.jsonl), so the evaluation asks pairs never
trained on. The `normalized_match` reward reads what follows the last "The answer is" and wants the
larger number: SmolLM2-135M-Instruct often answers otherwise ("To solve this problem, we need to",
"29 is larger than 31"), so there is something to learn.
"""

import json
import random
import sys
from pathlib import Path

MAX_NUMBER = 99
NUM_TEST = 64
SEED = 0
TEMPLATE = "Which number is larger, {a} or {b}? Reply in the form: The answer is N."


def main(out_dir: str) -> None:
    pairs = [(a, b) for a in range(1, MAX_NUMBER + 1) for b in range(a + 1, MAX_NUMBER + 1)]
    rng = random.Random(SEED)
    rng.shuffle(pairs)
    splits = {"test": pairs[:NUM_TEST], "train": pairs[NUM_TEST:]}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, chosen in splits.items():
        path = out / f"smollm2_larger_{split}.jsonl"
        with open(path, "w") as f:
            for a, b in chosen:
                if rng.random() < 0.5:  # the larger number first as often as second
                    a, b = b, a
                prompt = [{"role": "user", "content": TEMPLATE.format(a=a, b=b)}]
                f.write(json.dumps({"prompt": prompt, "answer": str(max(a, b))}) + "\n")
        print(f"wrote {path} ({len(chosen)} prompts)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data")
