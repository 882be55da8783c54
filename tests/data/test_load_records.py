"""load_records on real files of every supported format, and its errors."""

import json

import pandas as pd
import pytest

from steadyrl.errors import ConfigError, DataError
from steadyrl.data import eval_split_of, load_records

ROWS = [
    {"prompt": "What is 2+3?", "answer": "5", "source": "toy", "level": 1},
    {"prompt": "What is 10*7?", "answer": "70", "source": "toy", "level": 2},
]
GSM8K = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
        "in May. How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
        "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    },
    {
        "question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
        "How much did she earn?",
        "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned "
        "0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
    },
]
CHAT = [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}],
     "answer": "Paris"},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_keeps_prompt_answer_and_all_other_columns(tmp_path):
    records = load_records(write_jsonl(tmp_path / "train.jsonl", ROWS))
    assert records == ROWS


def test_json_list_and_data_wrapper(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(ROWS))
    (tmp_path / "b.json").write_text(json.dumps({"data": ROWS, "version": 2}))
    assert load_records(tmp_path / "a.json") == ROWS == load_records(tmp_path / "b.json")


def test_parquet_with_chat_messages(tmp_path):
    path = tmp_path / "chat.parquet"
    pd.DataFrame(CHAT).to_parquet(path)
    (record,) = load_records(path, prompt_key="messages")
    assert record == {"prompt": CHAT[0]["messages"], "answer": "Paris"}


def test_csv_cells_stay_strings_exactly_as_written(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('prompt,answer,id\n"Say ""hi"", then 007",007,NA\nSecond,1.50,\n')
    assert load_records(path) == [
        {"prompt": 'Say "hi", then 007', "answer": "007", "id": "NA"},
        {"prompt": "Second", "answer": "1.50", "id": ""},
    ]


def test_tsv_by_extension(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("prompt\tanswer\nx, y\t1\n")
    assert load_records(path) == [{"prompt": "x, y", "answer": "1"}]


def test_gsm8k_question_column_with_hash_answers(tmp_path):
    records = load_records(write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K), prompt_key="question")
    assert [r["answer"].rsplit("####", 1)[1].strip() for r in records] == ["72", "10"]
    assert set(records[0]) == {"prompt", "answer"}


def test_datasets_save_to_disk_dataset_and_dataset_dict(tmp_path):
    import datasets

    datasets.Dataset.from_list(GSM8K).save_to_disk(str(tmp_path / "single"))
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(GSM8K[:1]),
                               "test": datasets.Dataset.from_list(GSM8K[1:])})
    dd.save_to_disk(str(tmp_path / "dict"))
    assert len(load_records(tmp_path / "single", prompt_key="question")) == 2
    train = load_records(tmp_path / "dict", prompt_key="question")
    test = load_records(tmp_path / "dict", prompt_key="question", split="test")
    assert train[0]["prompt"] == GSM8K[0]["question"] and test[0]["prompt"] == GSM8K[1]["question"]
    with pytest.raises(DataError, match="no split 'validation'; splits: \\['test', 'train'\\]"):
        load_records(tmp_path / "dict", prompt_key="question", split="validation")


def _dataset_dict(path, **splits):
    import datasets

    datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items()}).save_to_disk(
        str(path))
    return path


def test_eval_split_is_test_then_validation_never_train(tmp_path):
    both = _dataset_dict(tmp_path / "both", train=GSM8K[:1], validation=GSM8K[:1], test=GSM8K[1:])
    assert eval_split_of(both, None) == "test"
    only_validation = _dataset_dict(tmp_path / "val", train=GSM8K[:1], validation=GSM8K[1:])
    assert eval_split_of(only_validation, None) == "validation"
    only_train = _dataset_dict(tmp_path / "train", train=GSM8K)
    with pytest.raises(DataError, match=r"splits \['train'\], none of them 'test' or 'validation': set data.eval_split"):
        eval_split_of(only_train, None)


def test_eval_split_chosen_in_the_config_wins_and_must_exist(tmp_path):
    both = _dataset_dict(tmp_path / "both", train=GSM8K[:1], test=GSM8K[1:])
    assert eval_split_of(both, "train") == "train"
    with pytest.raises(DataError, match=r"data.eval_split = 'dev': .* has no such split; its splits: \['train', 'test'\]"):
        eval_split_of(both, "dev")


def test_eval_split_of_a_file_is_none_and_may_not_be_set(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps(GSM8K[0]) + "\n")
    assert eval_split_of(path, None) is None
    with pytest.raises(DataError, match="data.eval_split = 'test' applies only to a datasets.save_to_disk DatasetDict"):
        eval_split_of(path, "test")


def test_column_mapping_answer_and_extra_keys(tmp_path):
    rows = [{"q": "hi", "gold": "1", "prompt": "old prompt", "a": 1, "b": 2}]
    path = write_jsonl(tmp_path / "x.jsonl", rows)
    # the unmapped column literally named "prompt" is left out: it would collide
    assert load_records(path, prompt_key="q", answer_key="gold") == [{"prompt": "hi", "answer": "1", "a": 1, "b": 2}]
    assert load_records(path, prompt_key="q", answer_key="missing", extra_keys=["b"]) == [{"prompt": "hi", "b": 2}]
    assert load_records(path, prompt_key="q", answer_key=None, extra_keys=[]) == [{"prompt": "hi"}]
    with pytest.raises(DataError, match="no extra column 'c'"):
        load_records(path, prompt_key="q", extra_keys=["c"])


def test_a_row_without_its_answer_gets_none(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"prompt": "a", "answer": "1"}, {"prompt": "b"}])
    assert [r["answer"] for r in load_records(path)] == ["1", None]


def test_missing_prompt_column_lists_columns_and_suggests(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", GSM8K)
    with pytest.raises(DataError, match=r"no prompt column 'questions'; columns: \['question', 'answer'\]; "
                                        r"did you mean 'question'\?") as info:
        load_records(path, prompt_key="questions")
    assert isinstance(info.value, ConfigError)


def test_malformed_jsonl_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": "b",}\n')
    with pytest.raises(DataError, match="bad.jsonl' line 3: invalid JSON"):
        load_records(path)
    path.write_text('{"prompt": "a"}\n[1, 2]\n')
    with pytest.raises(DataError, match="line 2: expected a JSON object, got list"):
        load_records(path)


def test_a_bad_prompt_value_names_its_line(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"prompt": "ok"}, {"prompt": 42}])
    with pytest.raises(DataError, match="line 2: column 'prompt' must be a non-empty string or"):
        load_records(path)
    path = write_jsonl(tmp_path / "y.jsonl", [{"prompt": "  "}])
    with pytest.raises(DataError, match="line 1: column 'prompt' is empty"):
        load_records(path)
    path = write_jsonl(tmp_path / "z.jsonl", [{"prompt": [{"role": "user"}]}])
    with pytest.raises(DataError, match="message 0 is not a"):
        load_records(path)


def test_json_lines_in_a_json_file_gets_a_hint(tmp_path):
    path = write_jsonl(tmp_path / "x.json", ROWS)
    with pytest.raises(DataError, match="looks like JSON Lines.*format='jsonl'"):
        load_records(path)
    assert load_records(path, format="jsonl") == ROWS


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("empty.jsonl", "\n\n", "holds no records"),
        ("empty.json", "[]", "holds no records"),
        ("empty.csv", "prompt,answer\n", "holds no records"),
        ("scalar.json", "3", "expected a list of objects"),
        ("bad.parquet", "not parquet", "cannot read it as Parquet"),
        ("ragged.csv", "prompt,answer\na,1,extra\n", "line 2: 3 fields, but the header has 2"),
        ("data.txt", "hello", "cannot tell the format from the extension '.txt'"),
    ],
)
def test_unreadable_or_empty_files_are_data_errors(tmp_path, name, content, match):
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=match):
        load_records(tmp_path / name)


def test_missing_paths_and_bad_options(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_records(tmp_path / "nope.jsonl")
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match="not a datasets.save_to_disk folder"):
        load_records(tmp_path / "folder")
    path = write_jsonl(tmp_path / "x.jsonl", ROWS)
    with pytest.raises(DataError, match="format='xml' is not one of"):
        load_records(path, format="xml")
    with pytest.raises(DataError, match="split='test' applies only to a datasets.save_to_disk folder"):
        load_records(path, split="test")
