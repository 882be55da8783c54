"""Write GSM8K as steadyrl prompt files: chat-format prompts and the '#### 72' gold answers.

    python examples/prepare_gsm8k.py data/          # needs `datasets` and network access once

The `math` reward reads the number after '####' in the answer column and verifies completions
with math-verify (\\boxed{...}, plain numbers, fractions).
"""

import json
import sys
from pathlib import Path

from datasets import load_dataset

INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{}."


def main(out_dir: str, instruction: str = INSTRUCTION, stem: str = "gsm8k") -> None:
    """Write ``<stem>_train.jsonl`` and ``<stem>_test.jsonl``: each question + ``instruction`` as one user message."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = load_dataset("openai/gsm8k", "main")
    for split in ("train", "test"):
        name = f"{stem}_{split}.jsonl"
        with open(out / name, "w") as f:
            for row in data[split]:
                prompt = [{"role": "user", "content": f"{row['question']}\n\n{instruction}"}]
                f.write(json.dumps({"prompt": prompt, "answer": row["answer"]}) + "\n")
        print(f"wrote {out / name} ({len(data[split])} prompts)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data")
