"""Hostile data rows are exit 2 naming the file and line, never a traceback (issue 30, item 10): a
value nested 5,000 deep, a 5,000-digit integer, a lone surrogate in a prompt (``"\\ud800"``, which no
tokenizer or file can take), in JSON Lines and JSON files, through :func:`load_records` and the
CLI's torch-free pre-flight."""

from __future__ import annotations

import json

import pytest

from steadyrl import cli
from steadyrl.data.loading import MAX_DEPTH, load_records
from steadyrl.errors import DataError

GOOD = '{"prompt": "cd", "answer": "e"}'
ROWS = {
    "deep": ('{"prompt": "ab", "answer": "c", "meta": ' + "[" * 5000 + "]" * 5000 + "}", "nested deeper"),
    "deep_but_readable": ('{"prompt": "ab", "answer": "c", "meta": ' + "[" * 100 + "]" * 100 + "}",
                          f"nests values more than {MAX_DEPTH} deep"),
    "big_int": ('{"prompt": "ab", "answer": ' + "9" * 5000 + "}", "5000 digits"),
    "surrogate_prompt": ('{"prompt": "ab\\ud800", "answer": "c"}', "lone surrogate"),
    "surrogate_in_chat": ('{"prompt": [{"role": "user", "content": "\\udc00x"}], "answer": "c"}', "lone surrogate"),
    "surrogate_answer": ('{"prompt": "ab", "answer": "\\ud83d"}', "lone surrogate"),
}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_a_hostile_jsonl_row_is_a_data_error_naming_the_line(tmp_path, name):
    row, said = ROWS[name]
    path = tmp_path / "train.jsonl"
    path.write_text(GOOD + "\n" + row + "\n")
    with pytest.raises(DataError) as caught:
        load_records(path)
    assert "line 2" in str(caught.value) and said in str(caught.value), str(caught.value)


@pytest.mark.parametrize("name", ["deep", "big_int", "surrogate_prompt"])
def test_a_hostile_json_file_is_a_data_error(tmp_path, name):
    row, said = ROWS[name]
    path = tmp_path / "train.json"
    path.write_text("[" + GOOD + ", " + row + "]")
    with pytest.raises(DataError) as caught:
        load_records(path)
    assert said in str(caught.value)


def test_a_surrogate_pair_is_text_and_loads(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": "smile \\ud83d\\ude00", "answer": "c"}\n')
    assert load_records(path)[0]["prompt"] == "smile \U0001F600"


@pytest.mark.parametrize("name", ["deep", "big_int", "surrogate_prompt"])
def test_train_refuses_a_hostile_row_with_exit_2_before_torch(tmp_path, capsys, name):
    row, said = ROWS[name]
    (tmp_path / "train.jsonl").write_text(GOOD + "\n" + row + "\n")
    config = {"model": {"name_or_path": str(tmp_path / "no-model-needed")},
              "data": {"train_path": str(tmp_path / "train.jsonl")}, "rewards": [{"name": "exact_match"}]}
    (tmp_path / "cfg.yaml").write_text(json.dumps(config))
    assert cli.main(["train", str(tmp_path / "cfg.yaml"), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.jsonl" in err[0] and said in err[0], err
