"""Write an APPS / TACO-style code dataset as steadyrl prompt files for the `code` reward.

    python examples/prepare_code.py data/                            # codeparrot/apps; needs `datasets` and network once
    python examples/prepare_code.py data/ --dataset BAAI/TACO        # the same columns
    python examples/prepare_code.py data/ --jsonl my_problems.jsonl  # a local file with those columns

Each row of those datasets has `question`, `starter_code` and `input_output`, a JSON text
`{"inputs": [...], "outputs": [...]}` (stdin / stdout cases) or the same with `"fn_name"`
(call cases: each input is the argument list). A row becomes

    {"prompt": [{"role": "user", "content": question + instructions}], "tests": input_output}

and the `code` reward reads `tests` (examples/code_rl.yaml). Rows whose tests do not parse are
skipped; `--max-tests N` keeps the first N cases of each row.
"""

import argparse
import json
import sys
from pathlib import Path

STDIO = ("Write a Python 3 program that reads the input from standard input and prints the answer to "
         "standard output. Put the whole program in one ```python code block at the end of your answer.")
CALL = ("Complete the function `{fn}` below in Python 3. It is called with the test's arguments and must "
        "return the answer (do not read input or print). Put the whole code in one ```python block at the end "
        "of your answer.")


def to_record(row: dict, max_tests: int | None = None) -> dict | None:
    """One prompt record from an APPS / TACO row; ``None`` when its tests are unusable."""
    try:
        tests = json.loads(row["input_output"]) if isinstance(row["input_output"], str) else row["input_output"]
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(tests, dict) or not tests.get("inputs") or len(tests["inputs"]) != len(tests.get("outputs", ())):
        return None
    if max_tests:
        tests = {**tests, "inputs": tests["inputs"][:max_tests], "outputs": tests["outputs"][:max_tests]}
    fn = tests.get("fn_name")
    text = row["question"].strip() + "\n\n" + (CALL.format(fn=fn) if fn else STDIO)
    starter = (row.get("starter_code") or "").strip()
    if starter:
        text += f"\n\n```python\n{starter}\n```"
    return {"prompt": [{"role": "user", "content": text}], "tests": json.dumps(tests)}


def _rows(args):
    if args.jsonl:
        with open(args.jsonl) as f:
            yield "train", [json.loads(line) for line in f if line.strip()]
        return
    from datasets import load_dataset

    for split in ("train", "test"):
        yield split, load_dataset(args.dataset, split=split)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="data")
    parser.add_argument("--dataset", default="codeparrot/apps", help="a hub dataset with APPS's columns")
    parser.add_argument("--jsonl", help="a local JSONL file with APPS's columns instead")
    parser.add_argument("--max-tests", type=int, default=20, help="keep the first N cases of each row")
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in _rows(args):
        path, kept = out / f"code_{split}.jsonl", 0
        with open(path, "w") as f:
            for row in rows:
                record = to_record(dict(row), args.max_tests)
                if record is not None:
                    f.write(json.dumps(record) + "\n")
                    kept += 1
        print(f"wrote {path} ({kept} prompts)")


if __name__ == "__main__":
    main(sys.argv[1:])
