"""Generated prompt rows: what :func:`steadyrl.data.load_records` returns for an adapter spec.

``reasoning_gym:<task>`` rows are the task's problems (:mod:`.reasoning_gym`); ``textarena:<GameId>``
rows are game starts (:mod:`.textarena`), played by the environment of the same name. The
``extra_keys`` setting applies as to a file; ``prompt_key`` / ``answer_key`` do not (the rows have
fixed columns) and ``format`` may not be set (there is no file).
"""

from __future__ import annotations

from ..errors import DataError
from .spec import parse_spec

KEY = "data path"
HELD_OUT_SPLIT = "test"
"""The split a held-out set reads when none is named (``data.eval_path``)."""


def generated_records(text: str, *, split: str | None, extra_keys: list[str] | None,
                      format: str | None = None) -> list[dict]:
    spec = parse_spec(text, KEY)
    if format is not None:
        raise DataError(f"{spec.where(KEY)} generates its rows: format={format!r} does not apply; unset it "
                        "(set format per file source instead of data.format when mixing files and generated rows)")
    if spec.adapter == "reasoning_gym":
        from .reasoning_gym import task_records

        rows = task_records(spec, split, KEY)
    elif spec.adapter == "textarena":
        from .textarena import game_records

        rows = game_records(spec, split, KEY)
    else:
        raise DataError(f"{spec.where(KEY)}: an {spec.adapter} spec is an environment, not data; give it as "
                        f"rollout.multi_turn.environment and train on rows from a file")
    if extra_keys is None:
        return rows
    columns = [c for c in rows[0] if c not in ("prompt", "answer")]
    missing = [k for k in extra_keys if k not in columns]
    if missing:
        raise DataError(f"{spec.where(KEY)}: no extra column {missing[0]!r}; its columns: {columns}")
    return [{k: v for k, v in row.items() if k in ("prompt", "answer") or k in extra_keys} for row in rows]
