"""A config file is input like any other: a few hundred bytes of nested YAML aliases (a "billion
laughs" document) must not take minutes to load, nor an alias inside its own anchor loop for ever.
Both are refused at once, naming the file; ordinary anchors and merge keys still work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from steadyrl.config import load_config
from steadyrl.config.loading import read_yaml
from steadyrl.config.yaml_limits import MAX_YAML_NODES
from steadyrl.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def billion_laughs(levels: int = 9) -> str:
    """9 nested levels of 9 aliases: 9**9 (387 million) strings from 530 bytes, inside a reward's
    options, where the schema accepts any value (so validation walks all of them)."""
    lines = ['x0: &x0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"x{i}: &x{i} [" + ",".join([f"*x{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "rewards:\n  - name: exact_match\n    options:\n" + "".join(f"      {line}\n" for line in lines)


def _steadyrl(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    # the time-out only turns a hang into a failure (the old loader took minutes); it is no benchmark
    return subprocess.run([sys.executable, "-m", "steadyrl", *args], env=env, capture_output=True, text=True,
                          timeout=90)


def test_a_billion_laughs_config_is_refused_at_once_naming_the_file(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(billion_laughs())
    assert path.stat().st_size < 1000
    for command in (["config", "show", str(path)], ["train", str(path), "--output-dir", str(tmp_path / "run")]):
        done = _steadyrl(*command)
        assert done.returncode == 2, done.stderr
        err = done.stderr.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert str(path) in err and "aliases" in err and f"{MAX_YAML_NODES:,}" in err
    assert not (tmp_path / "run").exists()


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("rewards:\n  - name: exact_match\n    options: &me {again: *me}\n")
    with pytest.raises(ConfigError, match="loop.yaml.*refers to the anchor it is inside of"):
        read_yaml(path)


def test_a_deeply_nested_file_is_an_error_not_a_traceback(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("trainer: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ConfigError, match="deep.yaml"):
        load_config(path)


def test_ordinary_anchors_aliases_and_merge_keys_still_load(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text(
        "rewards:\n"
        "  - {name: regex_format, label: starts, options: &opts {pattern: '^a'}}\n"
        "  - {name: regex_format, label: again, options: *opts}\n"
        "optim: &optim {lr: 3.0e-6}\n"
        "trainer:\n  max_steps: 5\n"
    )
    config = load_config(path)
    assert [r.options for r in config.rewards] == [{"pattern": "^a"}, {"pattern": "^a"}]
    assert config.optim.lr == 3e-6
    merged = tmp_path / "merged.yaml"
    merged.write_text("base: &base {max_steps: 5, seed: 3}\n")
    assert read_yaml(merged) == {"base": {"max_steps": 5, "seed": 3}}
    merged.write_text("x: &b {max_steps: 5}\ny:\n  <<: *b\n  seed: 3\n")
    assert read_yaml(merged)["y"] == {"max_steps": 5, "seed": 3}


def test_a_wide_but_honest_document_is_accepted(tmp_path):
    path = tmp_path / "wide.yaml"
    items = ", ".join(str(i) for i in range(MAX_YAML_NODES // 2))
    path.write_text(f"rewards:\n  - name: exact_match\n    options: {{many: [{items}]}}\n")
    assert len(read_yaml(path)["rewards"][0]["options"]["many"]) == MAX_YAML_NODES // 2
