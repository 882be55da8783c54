"""examples/prepare_code.py turns APPS / TACO rows into records the ``code`` reward scores:
run offline on a local JSONL file with APPS's columns, then scored with correct and wrong programs."""

import importlib.util
import json
from pathlib import Path

from steadyrl.rewards import RewardScorer, RewardSpec, load_reward

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "prepare_code.py"
ROWS = [
    {"question": "Print the sum of two integers.", "starter_code": "",
     "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]})},
    {"question": "Return the larger number.", "starter_code": "def bigger(a, b):",
     "input_output": json.dumps({"fn_name": "bigger", "inputs": [[1, 2], [7, 3]], "outputs": [[2], [7]]})},
    {"question": "Broken row.", "starter_code": "", "input_output": "not json"},
]


def test_apps_rows_become_prompt_records_the_code_reward_scores(tmp_path):
    spec = importlib.util.spec_from_file_location("prepare_code", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = tmp_path / "apps.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    module.main([str(tmp_path / "out"), "--jsonl", str(source)])
    records = [json.loads(line) for line in (tmp_path / "out" / "code_train.jsonl").read_text().splitlines()]
    assert len(records) == 2  # the broken row is skipped
    assert "standard input" in records[0]["prompt"][0]["content"]
    assert "def bigger(a, b):" in records[1]["prompt"][0]["content"]
    programs = ["```python\na, b = map(int, input().split())\nprint(a + b)\n```",
                "```python\ndef bigger(a, b):\n    return max(a, b)\n```"]
    fn = load_reward("code", test_timeout_s=1.0, workers=2)
    with RewardScorer([RewardSpec("code", fn, timeout_s=30, chunk_size=None)]) as scorer:
        tests = [r["tests"] for r in records]
        assert scorer.score(["p", "p"], programs, {"tests": tests}).raw["code"] == [1.0, 1.0]
        assert scorer.score(["p", "p"], programs[::-1], {"tests": tests}).raw["code"] == [0.0, 0.0]
