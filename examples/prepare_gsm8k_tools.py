"""Write GSM8K as prompt files for tool use: the model may call a calculator before it answers.

    python examples/prepare_gsm8k_tools.py data/    # needs `datasets` and network access once
    steadyrl train examples/qwen_tools.yaml --output-dir runs/qwen-tools

Each prompt is one user message; the tool's schema reaches the model through the chat template
(Qwen2.5 lists it in the system prompt and teaches the `<tool_call>{json}</tool_call>` format), so
the prompt only says when to use it. The `math` reward reads the number after '####' in the answer
column and checks the last \\boxed{} of the transcript.
"""

import json
import sys
from pathlib import Path

from datasets import load_dataset

INSTRUCTION = ("Use the calculate tool for any arithmetic you are not sure of. When you know the answer, "
               "reply without a tool call and put the final answer in \\boxed{}.")


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = load_dataset("openai/gsm8k", "main")
    for split, name in (("train", "gsm8k_tools_train.jsonl"), ("test", "gsm8k_tools_test.jsonl")):
        with open(out / name, "w") as f:
            for row in data[split]:
                prompt = [{"role": "user", "content": f"{row['question']}\n\n{INSTRUCTION}"}]
                f.write(json.dumps({"prompt": prompt, "answer": row["answer"]}) + "\n")
        print(f"wrote {out / name} ({len(data[split])} prompts)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data")
