"""Prompt records from files: JSONL, JSON, Parquet, CSV and ``datasets.save_to_disk`` folders.

``load_records`` returns one dict per row::

    {"prompt": str | [{"role": ..., "content": ...}, ...], "answer": ..., <extra columns>}

* ``prompt`` comes from column ``prompt_key``: a non-empty string, or a chat-format list of
  messages (each a dict with ``role`` and ``content``);
* ``answer`` comes from column ``answer_key``, and is absent when the data has no such column
  (or ``answer_key=None``); a row may hold ``None`` there;
* the other columns are kept under their own names (``extra_keys=None``), or only those listed in
  ``extra_keys``. With ``extra_keys=None`` a column literally named ``prompt`` / ``answer`` that is
  not the mapped one is left out (it would collide with the mapped one).

The format comes from ``format`` or the extension (``.jsonl``/``.ndjson``, ``.json``,
``.parquet``/``.pq``, ``.csv``, ``.tsv``); a folder is format ``arrow``: a
``datasets.save_to_disk`` folder (a ``DatasetDict`` uses split ``split``, default ``"train"``).
A path ``reasoning_gym:<task>`` or ``textarena:<GameId>`` is no file: its rows are generated
(:mod:`steadyrl.envs`, docs/environments.md).
CSV cells are read as strings, exactly as written (no number or NA guessing). Every problem is a
:class:`~steadyrl.errors.DataError` naming the file (and the line for JSONL / JSON Lines).
"""

from __future__ import annotations

import csv
import difflib
import json
from pathlib import Path
from typing import Literal

from ..envs.spec import is_spec
from ..errors import DataError

__all__ = ["load_records", "eval_split_of", "DataFormat", "DATA_FORMATS", "is_chat", "EVAL_SPLITS"]

DataFormat = Literal["jsonl", "json", "parquet", "csv", "tsv", "arrow"]
DATA_FORMATS: tuple[str, ...] = ("jsonl", "json", "parquet", "csv", "tsv", "arrow")
_EXTENSIONS = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet", ".pq": "parquet",
    ".csv": "csv", ".tsv": "tsv",
}


def _file(path: Path) -> str:
    """How messages name a data path."""
    return f"data {'folder' if path.is_dir() else 'file'} {str(path)!r}"


def _infer_format(path: Path) -> str:
    if path.is_dir():
        return "arrow"
    fmt = _EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(
            f"{_file(path)}: cannot tell the format from the extension {path.suffix!r}; "
            f"use one of {sorted(_EXTENSIONS)} or set format to one of {list(DATA_FORMATS)}"
        )
    return fmt


def _read_jsonl(path: Path) -> tuple[list[dict], list[str]]:
    rows, where = [], []
    with path.open(encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(
                    f"{_file(path)} line {lineno}: invalid JSON ({err.msg}, column {err.colno})"
                ) from None
            except (RecursionError, ValueError) as err:  # nested thousands deep; a 5,000-digit integer
                raise DataError(f"{_file(path)} line {lineno}: unreadable JSON value ({_why(err)})") from None
            if not isinstance(row, dict):
                raise DataError(
                    f"{_file(path)} line {lineno}: expected a JSON object, got {type(row).__name__}"
                )
            rows.append(row)
            where.append(f"line {lineno}")
    return rows, where


def _read_json(path: Path) -> tuple[list[dict], list[str]]:
    try:
        with path.open(encoding="utf-8-sig") as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        hint = ""
        if err.msg == "Extra data":
            hint = "; it looks like JSON Lines: name it .jsonl or set format='jsonl'"
        raise DataError(f"{_file(path)} line {err.lineno}: invalid JSON ({err.msg}){hint}") from None
    except (RecursionError, ValueError) as err:  # nested thousands deep; a 5,000-digit integer
        raise DataError(f"{_file(path)}: unreadable JSON value ({_why(err)})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DataError(
            f"{_file(path)}: expected a list of objects or {{\"data\": [...]}}, got a {type(data).__name__}"
            + (f" with keys {sorted(data)[:10]}" if isinstance(data, dict) else "")
        )
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise DataError(f"{_file(path)}: item {i} is a {type(row).__name__}, expected an object")
    return data, [f"item {i}" for i in range(len(data))]


MAX_DEPTH = 64
"""How deep a row's values may nest (lists in dicts in lists...): a chat prompt is 3 deep."""


def _why(err: Exception) -> str:
    if isinstance(err, RecursionError):
        return f"a value nested deeper than Python can read; steadyrl takes values at most {MAX_DEPTH} deep"
    return str(err).split(";")[0]


def check_value(value, where: str, key: str) -> None:
    """:class:`DataError` naming ``where`` and ``key`` for a value nested more than :data:`MAX_DEPTH`
    deep or holding text that is not valid Unicode (a lone surrogate, ``"\\ud800"`` in JSON: no
    tokenizer or file can take it). Iterative, linear in the value's size."""
    todo = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as err:
                raise DataError(f"{where}: column {key!r} holds a lone surrogate {item[err.start]!r} at character "
                                f"{err.start}, which is not text (JSON '\\ud800' escapes must come in pairs)") from None
        elif isinstance(item, (list, tuple, dict)):
            if depth >= MAX_DEPTH:
                raise DataError(f"{where}: column {key!r} nests values more than {MAX_DEPTH} deep")
            children = [x for pair in item.items() for x in pair] if isinstance(item, dict) else item
            todo.extend((child, depth + 1) for child in children)


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise DataError(f"{_file(path)}: cannot read it as Parquet ({type(err).__name__}: {err})") from None


def _read_csv(path: Path, delimiter: str) -> tuple[list[dict], list[str]]:
    rows, where = [], []
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f, delimiter=delimiter)
            for row in reader:
                if None in row:
                    header = len(reader.fieldnames)
                    raise DataError(
                        f"{_file(path)} line {reader.line_num}: {header + len(row[None])} fields, "
                        f"but the header has {header}"
                    )
                rows.append(row)
                where.append(f"line {reader.line_num}")
    except (csv.Error, UnicodeDecodeError) as err:
        raise DataError(f"{_file(path)}: cannot read it as CSV ({err})") from None
    return rows, where


def _read_datasets_dir(path: Path, split: str | None):
    if not (path / "dataset_info.json").exists() and not (path / "dataset_dict.json").exists():
        raise DataError(
            f"{_file(path)} is not a datasets.save_to_disk folder "
            "(it has no dataset_info.json or dataset_dict.json); give a file instead"
        )
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as err:  # noqa: BLE001
        raise DataError(f"{_file(path)}: load_from_disk failed ({type(err).__name__}: {err})") from None
    if isinstance(ds, datasets.DatasetDict):
        name = split or "train"
        if name not in ds:
            raise DataError(f"{_file(path)}: no split {name!r}; splits: {sorted(ds)}; set split")
        ds = ds[name]
    elif split is not None:
        raise DataError(
            f"{_file(path)} holds one Dataset, not a DatasetDict: split={split!r} does not apply"
        )
    return ds.to_list()


EVAL_SPLITS = ("test", "validation")
"""The splits of a ``DatasetDict`` that hold held-out data, in the order ``data.eval_path`` looks for
them when ``data.eval_split`` is null (never ``train``: scoring training prompts as held-out
data would report an accuracy that means nothing)."""


def eval_split_of(path: str | Path, eval_split: str | None) -> str | None:
    """The split ``data.eval_path`` reads: for a ``DatasetDict`` folder ``data.eval_split``, else
    the first of :data:`EVAL_SPLITS` it holds; None for a file or a single ``Dataset``.

    Reads only the folder's ``dataset_dict.json``: a wrong split is found before any data loads.
    An adapter spec (``reasoning_gym:<task>``) reads ``data.eval_split``, else its held-out split.
    """
    if is_spec(path):
        from ..envs.rows import HELD_OUT_SPLIT

        return HELD_OUT_SPLIT if eval_split is None else eval_split
    path = Path(path).expanduser()
    listing = path / "dataset_dict.json"
    if not listing.is_file():
        if eval_split is not None and not (path / "dataset_info.json").is_file():
            raise DataError(f"data.eval_split = {eval_split!r} applies only to a datasets.save_to_disk "
                            f"DatasetDict folder, but data.eval_path = {str(path)!r} is not one; unset it")
        return eval_split  # a single Dataset: load_records says the split does not apply
    try:
        splits = list(json.loads(listing.read_text(encoding="utf-8"))["splits"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(f"{_file(path)}: cannot read its dataset_dict.json ({err})") from None
    if eval_split is not None:
        if eval_split not in splits:
            raise DataError(f"data.eval_split = {eval_split!r}: {_file(path)} has no such split; "
                            f"its splits: {splits}")
        return eval_split
    for name in EVAL_SPLITS:
        if name in splits:
            return name
    raise DataError(f"data.eval_path = {str(path)!r} is a DatasetDict with splits {splits}, none of them "
                    f"{' or '.join(map(repr, EVAL_SPLITS))}: set data.eval_split to its held-out split")


def _rows(rows: list[dict]) -> tuple[list[dict], list[str]]:
    return rows, [f"row {i}" for i in range(len(rows))]


def _read(path: Path, fmt: str, split: str | None) -> tuple[list[dict], list[str]]:
    """The rows, and where each one is in the file (``line 7``, ``item 3``, ``row 3``)."""
    if fmt != "arrow" and split is not None:
        raise DataError(f"split={split!r} applies only to a datasets.save_to_disk folder, not {_file(path)}")
    if fmt == "arrow":
        return _rows(_read_datasets_dir(path, split))
    if path.is_dir():
        raise DataError(f"{_file(path)} is a folder, but format={fmt!r} needs a file")
    try:
        if fmt == "jsonl":
            return _read_jsonl(path)
        if fmt == "json":
            return _read_json(path)
        if fmt == "parquet":
            return _rows(_read_parquet(path))
        return _read_csv(path, "\t" if fmt == "tsv" else ",")
    except UnicodeDecodeError as err:
        raise DataError(f"{_file(path)} is not UTF-8 text ({err.reason} at byte {err.start})") from None


def is_chat(prompt) -> bool:
    """A chat-format prompt: a list of messages (dicts)."""
    return isinstance(prompt, list)


def _check_prompt(prompt, where: str, key: str) -> None:
    if isinstance(prompt, str):
        if not prompt.strip():
            raise DataError(f"{where}: column {key!r} is empty")
        return
    if isinstance(prompt, list) and prompt:
        for j, msg in enumerate(prompt):
            if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
                raise DataError(
                    f"{where}: column {key!r} is a message list, but message {j} is not a "
                    f"{{'role': ..., 'content': ...}} dict: {msg!r:.80}"
                )
        return
    raise DataError(
        f"{where}: column {key!r} must be a non-empty string or a non-empty list of "
        f"{{'role', 'content'}} messages, got {type(prompt).__name__} {prompt!r:.60}"
    )


def _columns(rows: list[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def _missing_column(path: Path, what: str, key: str, columns: list[str]) -> DataError:
    close = difflib.get_close_matches(key, columns, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return DataError(f"{_file(path)}: no {what} column {key!r}; columns: {columns}{hint}")


def load_records(
    path: str | Path,
    *,
    format: DataFormat | None = None,
    prompt_key: str = "prompt",
    answer_key: str | None = "answer",
    extra_keys: list[str] | None = None,
    split: str | None = None,
) -> list[dict]:
    """The rows of ``path`` as prompt records (see the module docstring); an adapter spec
    (``reasoning_gym:<task>``, ``textarena:<GameId>``) generates them (:mod:`steadyrl.envs.rows`)."""
    if is_spec(path):
        from ..envs.rows import generated_records

        return generated_records(path, split=split, extra_keys=extra_keys, format=format)
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"data path {str(path)!r} does not exist")
    if format is not None and format not in DATA_FORMATS:
        raise DataError(f"format={format!r} is not one of {list(DATA_FORMATS)}")
    rows, locations = _read(path, format or _infer_format(path), split)
    if not rows:
        raise DataError(f"{_file(path)} holds no records")
    columns = _columns(rows)
    if prompt_key not in columns:
        raise _missing_column(path, "prompt", prompt_key, columns)
    has_answer = answer_key is not None and answer_key in columns
    if extra_keys is None:
        taken = {prompt_key, answer_key, "prompt", "answer"}
        extras = [c for c in columns if c not in taken]
    else:
        for key in extra_keys:
            if key not in columns:
                raise _missing_column(path, "extra", key, columns)
            if key in ("prompt", "answer", prompt_key, answer_key):
                raise DataError(f"extra_keys may not include {key!r}: it is the prompt or answer column")
        extras = list(extra_keys)
    records = []
    for row, location in zip(rows, locations):
        where = f"{_file(path)} {location}"
        if prompt_key not in row:
            raise DataError(f"{where}: no column {prompt_key!r}")
        _check_prompt(row[prompt_key], where, prompt_key)
        for key, value in row.items():  # nothing a later step cannot copy, tokenize or write
            check_value(value, where, key)
        record = {"prompt": row[prompt_key]}
        if has_answer:
            record["answer"] = row.get(answer_key)
        for key in extras:
            record[key] = row.get(key)
        records.append(record)
    return records
