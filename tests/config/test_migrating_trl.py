"""docs/migrating.md's TRL table against the installed TRL's own ``GRPOConfig`` (TRL 1.16 here; the
dev extra installs trl): every name it lists exists there (or the row says it is not in TRL 1.16, or
is a trainer argument), every default it quotes is TRL's, and every GRPO setting TRL declares is
mapped (a steadyrl key, or a row saying there is none and why)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")

DOCS = Path(__file__).resolve().parents[2] / "docs"
ALSO_MAPPED = ("use_liger_kernel", "warmup_steps", "lr_scheduler_type", "bf16", "gradient_checkpointing", "seed")
"""TrainingArguments names a TRL user sets for GRPO that the table must carry too."""
_NAME = re.compile(r"`([a-z_0-9]+)`(?:\s*\(([^)]*)\))?")


def _rows() -> list[tuple[str, str]]:
    """``(first cell, whole row)`` of the TRL table."""
    text = (DOCS / "migrating.md").read_text()
    section = text[text.index("## From TRL"):text.index("## From verl")]
    return [(line.split("|")[1], line) for line in section.splitlines()
            if line.startswith("| `") or line.startswith("| a reward")]


def _fields() -> dict[str, dataclasses.Field]:
    from trl import GRPOConfig

    return {f.name: f for f in dataclasses.fields(GRPOConfig)}


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def _parse(text: str):
    """A quoted default: ``1e-6``, ``true``, ``null = no limit``, ```dapo```, ``512; 256 up to TRL 1.9``."""
    text = re.split(r"[;=]", text)[0].strip()
    if text.startswith("`") and text.endswith("`"):
        return text.strip("`")
    words = {"true": True, "false": False, "null": None}
    if text in words:
        return words[text]
    return float(text)


def test_every_name_in_the_trl_table_is_a_grpoconfig_field_or_says_why_not():
    fields = _fields()
    stray = []
    for cell, row in _rows():
        for name, _ in _NAME.findall(cell):
            if name not in fields and "(trainer argument)" not in cell and "Not in TRL 1.16" not in row:
                stray.append(name)
    assert stray == [], f"not in trl {trl.__version__}'s GRPOConfig: {stray}"


def test_every_default_the_trl_table_quotes_is_the_installed_trls():
    fields = _fields()
    wrong, checked = [], 0
    for cell, _ in _rows():
        for name, quoted in _NAME.findall(cell):
            if not quoted or name not in fields:
                continue
            checked += 1
            if _parse(quoted) != _default(fields[name]):
                wrong.append((name, quoted, _default(fields[name])))
    assert checked >= 25 and wrong == [], wrong


def test_every_grpo_setting_of_the_installed_trl_is_mapped():
    from transformers import TrainingArguments

    inherited = {f.name for f in dataclasses.fields(TrainingArguments)}
    listed = {name for cell, _ in _rows() for name, _ in _NAME.findall(cell)}
    own = [name for name in _fields() if name not in inherited]
    missing = sorted(n for n in (*own, *ALSO_MAPPED) if n not in listed)
    assert missing == [], f"trl {trl.__version__}'s GRPOConfig settings docs/migrating.md does not map: {missing}"


def test_the_parser_reads_the_quoted_defaults():
    assert _parse("1e-6") == 1e-6 and _parse("`dapo`") == "dapo" and _parse("null = no limit") is None
    assert _parse("512; 256 up to TRL 1.9") == 512 and _parse("true") is True
