"""Write an APPS / TACO-style code dataset as steadyrl prompt files for the `code` reward.

    python examples/prepare_code.py data/                          # codeparrot/apps; needs `datasets` and network once
    python examples/prepare_code.py data/ --dataset BAAI/TACO      # the same columns
    python examples/prepare_code.py data/ --jsonl mine.jsonl --test-jsonl mine_test.jsonl   # your own files

Each row of those datasets has `question`, `starter_code` and `input_output`, a JSON text
`{"inputs": [...], "outputs": [...]}` (stdin / stdout cases) or the same with `"fn_name"`
(call cases: each input is the argument list). A row becomes

    {"prompt": [{"role": "user", "content": question + instructions}], "tests": input_output}

and the `code` reward reads `tests` (examples/code_rl.yaml). Your own files are JSONL with the same
columns (`prompt` may stand for `question`; `starter_code` is optional): `--jsonl` becomes
`code_train.jsonl`, `--test-jsonl` the held-out `code_test.jsonl` (without one, train with
`data.eval_path=null`). Rows whose tests do not parse are skipped and counted; `--max-tests N`
keeps the first N cases of each row.
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
    question = row.get("question", row.get("prompt"))
    if not isinstance(question, str) or not question.strip():
        return None
    fn = tests.get("fn_name")
    text = question.strip() + "\n\n" + (CALL.format(fn=fn) if fn else STDIO)
    starter = (row.get("starter_code") or "").strip()
    if starter:
        text += f"\n\n```python\n{starter}\n```"
    return {"prompt": [{"role": "user", "content": text}], "tests": json.dumps(tests)}


def _fail(message: str) -> None:
    print(f"prepare_code.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def _read_jsonl(path: str) -> list[dict]:
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as err:
                    _fail(f"{path} line {number} is not JSON: {err}")
    return rows


def _rows(args):
    if args.jsonl or args.test_jsonl:  # your own files: no download
        for split, path in (("train", args.jsonl), ("test", args.test_jsonl)):
            if path:
                yield split, _read_jsonl(path)
        return
    from datasets import load_dataset

    for split in ("train", "test"):
        yield split, load_dataset(args.dataset, split=split)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="data")
    parser.add_argument("--dataset", default="codeparrot/apps", help="a hub dataset with APPS's columns")
    parser.add_argument("--jsonl", help="your own training problems: a JSONL file with APPS's columns "
                        "(question or prompt, input_output, optional starter_code) -> code_train.jsonl")
    parser.add_argument("--test-jsonl", help="your own held-out problems, the same columns -> code_test.jsonl")
    parser.add_argument("--max-tests", type=int, default=20, help="keep the first N cases of each row")
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in _rows(args):
        path, kept, skipped = out / f"code_{split}.jsonl", 0, 0
        with open(path, "w") as f:
            for row in rows:
                record = to_record(dict(row), args.max_tests)
                if record is None:
                    skipped += 1
                    continue
                f.write(json.dumps(record) + "\n")
                kept += 1
        print(f"wrote {path} ({kept} prompts; {skipped} rows skipped: no question, or tests that do not parse)")
        if not kept:
            _fail(f"no usable row for {path}: each row needs a question (or prompt) and input_output "
                  '{"inputs": [...], "outputs": [...]} with as many outputs as inputs')
    if args.jsonl and not args.test_jsonl:
        print("no held-out file (--test-jsonl): train with data.eval_path=null, or give one")


if __name__ == "__main__":
    main(sys.argv[1:])
