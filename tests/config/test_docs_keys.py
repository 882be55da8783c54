"""Every config key the pages name exists: backticked keys (``rollout.multi_turn.max_turns``,
``trainer.padding_free=true``) and ``key=value`` overrides in command blocks, on every page of
docs/ and in the README, and every YAML example made of whole sections loads as a config.

docs/migrating.md is left out of the key check: its first columns are TRL's and verl's names on
purpose (tests/config/test_docs.py checks its steadyrl column and the advice for each name).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from steadyrl.config import Config, load_config
from steadyrl.config.loading import _all_paths
from steadyrl.config.renamed import RENAMED_KEYS
from steadyrl.config.schema import RewardConfig

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
KEYS = set(_all_paths(Config)) | {f"rewards[].{p}" for p in _all_paths(RewardConfig)}
SECTIONS = set(Config.model_fields)
# names the pages show on purpose as what not to write, each with the text around it
WRONG_ON_PURPOSE = {
    "trainer.lr": "`trainer.lr` -> `optim.lr`",  # configuration.md: the unknown-key hint
    "rollout.async": "not `rollout.async`",  # scaling.md: the section is rollout.asynchronous
    # agents.md and migrating.md: verl's name in a TRL / verl -> steadyrl table
    "data.apply_chat_template_kwargs": "`data.apply_chat_template_kwargs` | `data.chat_template_kwargs`",
}

_HEAD = "|".join(sorted(SECTIONS - {"rewards"})) + r"|rewards\[\]"  # "rewards.md" is a file, not a key
_SPAN = re.compile(rf"((?:{_HEAD})(?:\.[a-z_][a-z0-9_]*)+)(?:\s*[=:].*)?")
_OVERRIDE = re.compile(rf"(?<![\w./-])((?:{_HEAD})(?:\.[a-z_][a-z0-9_]*)+)=")


def named_keys(text: str) -> list[str]:
    spans = [m.group(1) for s in re.findall(r"`([^`\n]+)`", text) if (m := _SPAN.fullmatch(s.strip()))]
    blocks = re.findall(r"```(?:bash|console|sh)?\n(.*?)```", text, flags=re.S)
    return spans + [key for block in blocks for key in _OVERRIDE.findall(block)]


def test_the_key_finder_finds_spans_and_overrides_and_skips_file_names():
    text = ("Set `rollout.multi_turn.max_turns` or `trainer.padding_free: true`, see [rewards.md](rewards.md) and "
            "`rewards[].weight`.\n```bash\nsteadyrl train c.yaml optim.lr=1e-6 --output-dir runs/x\n```\n")
    assert named_keys(text) == ["rollout.multi_turn.max_turns", "trainer.padding_free", "rewards[].weight", "optim.lr"]


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "migrating.md"], ids=lambda p: p.name)
def test_every_key_a_page_names_exists(page):
    text = page.read_text(encoding="utf-8")
    named = named_keys(text)
    unknown = sorted({k for k in named if k not in KEYS
                      and not (k in WRONG_ON_PURPOSE and WRONG_ON_PURPOSE[k] in text)
                      and not (k in RENAMED_KEYS and RENAMED_KEYS[k] in named)})  # an old name beside its new one
    assert unknown == []


def test_the_pages_name_many_keys():
    assert sum(len(named_keys(p.read_text(encoding="utf-8"))) for p in PAGES) > 400


def _whole_config_blocks() -> list[tuple[str, str]]:
    import yaml

    out = []
    for page in PAGES:
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)):
            data = yaml.safe_load(block)
            if isinstance(data, dict) and data and set(data) <= SECTIONS:
                out.append((f"{page.name}#{i}", block))
    return out


BLOCKS = _whole_config_blocks()


@pytest.mark.parametrize(("where", "block"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_every_yaml_example_of_whole_sections_loads(where, block, tmp_path):
    """A fragment that sets data but names no model is given one: the check is the keys and values."""
    path = tmp_path / "example.yaml"
    path.write_text(block)
    load_config(path, [] if "name_or_path" in block else ["model.name_or_path=some/model"])
