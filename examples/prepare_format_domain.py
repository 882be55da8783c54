"""Write a second, differently shaped prompt file from GSM8K: the `format` domain of
examples/math_and_format.yaml, whose reward checks the shape of the reply, not its answer.

    python examples/prepare_gsm8k.py data/            # the math domain (gsm8k_*.jsonl)
    python examples/prepare_format_domain.py data/    # the format domain (format_*.jsonl)

Its columns are `question` and `reference` on purpose (not `prompt` / `answer`): the source's own
prompt_key / answer_key in the config map them.
"""

import json
import sys
from pathlib import Path

INSTRUCTION = ("Think step by step inside <think> ... </think>, then give only the final number on "
               "the last line as 'Answer: <number>'.")


def main(out_dir: str) -> None:
    out = Path(out_dir)
    for split in ("train", "test"):
        source = out / f"gsm8k_{split}.jsonl"
        if not source.exists():
            sys.exit(f"{source} is missing: run examples/prepare_gsm8k.py {out_dir} first")
        rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
        target = out / f"format_{split}.jsonl"
        with open(target, "w") as f:
            for row in rows[1::2]:  # every other problem: the two domains do not share prompts
                question = row["prompt"][0]["content"].split("\n\n")[0]
                prompt = [{"role": "user", "content": f"{question}\n\n{INSTRUCTION}"}]
                f.write(json.dumps({"question": prompt, "reference": row["answer"]}) + "\n")
        print(f"wrote {target} ({len(rows[1::2])} prompts)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data")
