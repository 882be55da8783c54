"""examples/prepare_code.py turns APPS / TACO rows into records the ``code`` reward scores:
run offline on a local JSONL file with APPS's columns, then scored with correct and wrong programs."""

import importlib.util
import json
from pathlib import Path

import pytest

from steadyrl.rewards import RewardScorer, RewardSpec, load_reward

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "prepare_code.py"
ROWS = [
    {"question": "Print the sum of two integers.", "starter_code": "",
     "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]})},
    {"question": "Return the larger number.", "starter_code": "def bigger(a, b):",
     "input_output": json.dumps({"fn_name": "bigger", "inputs": [[1, 2], [7, 3]], "outputs": [[2], [7]]})},
    {"question": "Broken row.", "starter_code": "", "input_output": "not json"},
]


def _script():
    spec = importlib.util.spec_from_file_location("prepare_code", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_apps_rows_become_prompt_records_the_code_reward_scores(tmp_path):
    module = _script()
    source = tmp_path / "apps.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    module.main([str(tmp_path / "out"), "--jsonl", str(source)])
    records = [json.loads(line) for line in (tmp_path / "out" / "code_train.jsonl").read_text().splitlines()]
    assert len(records) == 2  # the broken row is skipped
    assert "standard input" in records[0]["prompt"][0]["content"]
    assert "def bigger(a, b):" in records[1]["prompt"][0]["content"]
    programs = ["```python\na, b = map(int, input().split())\nprint(a + b)\n```",
                "```python\ndef bigger(a, b):\n    return max(a, b)\n```"]
    fn = load_reward("code", test_timeout_s=10.0, workers=2)  # room for a loaded machine
    with RewardScorer([RewardSpec("code", fn, timeout_s=30, chunk_size=None)]) as scorer:
        tests = [r["tests"] for r in records]
        assert scorer.score(["p", "p"], programs, {"tests": tests}).raw["code"] == [1.0, 1.0]
        assert scorer.score(["p", "p"], programs[::-1], {"tests": tests}).raw["code"] == [0.0, 0.0]


def test_your_own_train_and_held_out_files_become_the_files_code_rl_yaml_reads(tmp_path, capsys):
    # examples/code_rl.yaml reads data/code_train.jsonl and data/code_test.jsonl
    module = _script()
    train, held_out = tmp_path / "mine.jsonl", tmp_path / "mine_test.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    own = {"prompt": "Print the product of two integers.",  # `prompt` stands for `question`
           "input_output": {"inputs": ["2 3\n"], "outputs": ["6\n"]}}
    held_out.write_text(json.dumps(own) + "\n")
    module.main([str(tmp_path / "data"), "--jsonl", str(train), "--test-jsonl", str(held_out), "--max-tests", "1"])
    out = capsys.readouterr().out
    assert "code_train.jsonl (2 prompts; 1 rows skipped" in out and "code_test.jsonl (1 prompts; 0 rows" in out
    test_rows = [json.loads(line) for line in (tmp_path / "data" / "code_test.jsonl").read_text().splitlines()]
    assert test_rows[0]["prompt"][0]["content"].startswith("Print the product")
    assert json.loads(test_rows[0]["tests"]) == own["input_output"]
    first = json.loads((tmp_path / "data" / "code_train.jsonl").read_text().splitlines()[0])
    assert json.loads(first["tests"]) == {"inputs": ["1 2\n"], "outputs": ["3\n"]}  # --max-tests 1


def test_a_file_without_one_usable_row_exits_2_saying_what_a_row_needs(tmp_path, capsys):
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps({"title": "no question", "input_output": "{}"}) + "\n")
    with pytest.raises(SystemExit) as err:
        _script().main([str(tmp_path / "out"), "--jsonl", str(source)])
    assert err.value.code == 2
    assert "needs a question (or prompt) and input_output" in capsys.readouterr().err
