"""The run directory's own record: ``metrics.jsonl`` and ``samples.jsonl``, written and read.

One JSON object per line, each with a ``"step"``. Lines are flushed as they are written, so a
crash loses at most the line being written; a partial last line is tolerated by the reader and
cut off by the next writer. Non-finite floats (NaN, ±inf) are written as ``null``: strict JSON,
readable by every tool, and the reader treats ``null`` as "not logged".

:class:`JsonlWriter` keeps a file monotonic in ``step``:

* ``step == last step`` (``merge_same_step``): the new keys are merged into the last line, which
  is rewritten in place (train and eval metrics of one step end up on one line);
* ``step < last step``: a rewind, as after resuming from a checkpoint: lines with
  ``step >= step`` are dropped before the new line is appended, with a warning.

So ``metrics.jsonl`` never holds a step twice. ``samples.jsonl`` holds many rows per step
(``merge_same_step=False``), and is rewound the same way.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..files import atomic_write_bytes, read_bytes_nofollow

__all__ = ["JsonlWriter", "jsonable", "read_jsonl", "truncate_jsonl"]


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: tensors and numpy scalars become numbers, non-finite floats
    ``None``, mappings and sequences are converted recursively, anything else becomes ``str``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item):  # one-element tensor / numpy scalar
        try:
            return jsonable(item())
        except (ValueError, RuntimeError, TypeError):
            pass
    if callable(getattr(value, "tolist", None)):
        return jsonable(value.tolist())
    return str(value)


def _dumps(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(jsonable(dict(record)), ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def _parse(line: bytes) -> dict | None:
    """A line's object, or ``None`` when it is blank, cut short or not an object with a step."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("step"), (int, float)) or isinstance(obj.get("step"), bool):
        return None
    return obj


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Every object of a JSONL file that has a ``"step"``, in file order.

    A missing file reads as ``[]``. A partial last line (a crash mid-write: no final newline) is
    skipped silently; a damaged line elsewhere is skipped with a warning.
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return []
    *lines, tail = read_bytes_nofollow(path).split(b"\n")  # a link is refused; ``tail``: after the last newline
    rows, bad = [], 0
    for line in lines:
        if line.strip():
            obj = _parse(line)
            bad += obj is None
            if obj is not None:
                rows.append(obj)
    if tail.strip() and (obj := _parse(tail)) is not None:
        rows.append(obj)
    if bad:
        warnings.warn(f"{path}: skipped {bad} unreadable line(s)", RuntimeWarning, stacklevel=2)
    return rows


def truncate_jsonl(path: str | os.PathLike, *, max_step: float) -> int:
    """Drop the lines of ``path`` with ``step > max_step`` (and unreadable lines); returns how
    many were dropped. The file is rewritten atomically (:func:`steadyrl.files.atomic_write_bytes`)."""
    path = Path(path)
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_bytes().split(b"\n"):
        if not line.strip():
            continue
        obj = _parse(line)
        if obj is None or obj["step"] > max_step:
            dropped += 1
        else:
            kept.append(line + b"\n")
    if dropped:
        atomic_write_bytes(path, b"".join(kept))
    return dropped


class JsonlWriter:
    """Appends step-stamped objects to a JSONL file, one flushed line each (see the module doc)."""

    def __init__(self, path: str | os.PathLike, *, merge_same_step: bool):
        self.path = Path(path)
        self.merge_same_step = merge_same_step
        self._file = None
        self._last_step: int | None = None
        self._last_record: dict | None = None
        self._last_offset = 0
        self._open()

    def _open(self) -> None:
        """Open for appending, after cutting off a partial last line; remember the last step."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        end = data.rfind(b"\n") + 1  # everything after the last newline is a partial line
        self._last_step, self._last_record, self._last_offset = None, None, end
        start = data.rfind(b"\n", 0, max(end - 1, 0)) + 1 if end else 0
        last = _parse(data[start:end]) if end else None
        if last is not None:
            self._last_step, self._last_record, self._last_offset = last["step"], last, start
        self._file = open(self.path, "r+b" if self.path.exists() else "w+b")
        self._file.truncate(end)
        self._file.seek(end)

    def write(self, record: Mapping[str, Any], step: int) -> None:
        """Append ``{"step": step, **record}`` (merged into the last line when it is the same step)."""
        if self._last_step is not None and step < self._last_step:
            last = self._last_step
            dropped = self.truncate_after(step - 1)
            warnings.warn(
                f"{self.path.name}: step {step} comes after step {last}; dropped {dropped} line(s) "
                f"with a step >= {step} (a resumed run rewinds its log)",
                RuntimeWarning,
                stacklevel=3,
            )
        if self.merge_same_step and self._last_step == step and self._last_record is not None:
            merged = {**self._last_record, **jsonable(dict(record)), "step": step}
            self._file.seek(self._last_offset)
            self._file.truncate()
            self._append(merged, step)
            return
        self._append({"step": step, **record}, step)

    def _append(self, record: dict, step: int) -> None:
        line = _dumps(record)
        self._last_offset = self._file.tell()
        self._file.write(line)
        self._file.flush()
        self._last_step, self._last_record = step, json.loads(line)

    def truncate_after(self, step: float) -> int:
        """Drop lines with a step greater than ``step``; returns how many were dropped."""
        self._file.close()
        dropped = truncate_jsonl(self.path, max_step=step)
        self._open()
        return dropped

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.flush()
            self._file.close()
