"""Write the small-sums task of examples/smollm2_grpo.yaml: "What is 7 + 5? Reply with only the number."

    python examples/prepare_smollm2_arith.py data/      # no download: the prompts are generated

Every pair of operands in 1..MAX_OPERAND is one prompt; a fixed, seeded quarter of the pairs is
held out (data/smollm2_add_test.jsonl), so the evaluation asks sums never trained on. The gold
answer is the sum; the `normalized_match` reward wants the reply to be that number and nothing
else, which SmolLM2-135M-Instruct rarely does out of the box ("7 + 5 = 12", "The answer is...").
"""

import json
import random
import sys
from pathlib import Path

MAX_OPERAND = 12
HELD_OUT = 0.25
SEED = 0
TEMPLATE = "What is {a} + {b}? Reply with only the number."


def main(out_dir: str) -> None:
    pairs = [(a, b) for a in range(1, MAX_OPERAND + 1) for b in range(1, MAX_OPERAND + 1)]
    random.Random(SEED).shuffle(pairs)
    n_test = round(len(pairs) * HELD_OUT)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, chosen in (("test", pairs[:n_test]), ("train", pairs[n_test:])):
        path = out / f"smollm2_add_{split}.jsonl"
        with open(path, "w") as f:
            for a, b in chosen:
                prompt = [{"role": "user", "content": TEMPLATE.format(a=a, b=b)}]
                f.write(json.dumps({"prompt": prompt, "answer": str(a + b)}) + "\n")
        print(f"wrote {path} ({len(chosen)} prompts)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data")
