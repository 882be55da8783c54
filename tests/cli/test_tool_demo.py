"""``steadyrl train demo.task=tool``: the multi-turn demo starts from its own built-in config,
trains end to end for a few steps on a tiny warm start, and prints a transcript before and after."""

from __future__ import annotations

import json

import pytest
import yaml

from steadyrl.config import load_config
from steadyrl.config.presets import DEMO_TOOL_CONFIG
from steadyrl.errors import ConfigError

FAST = ("demo.tool_skill_steps=4", "demo.warmstart_steps=2", "demo.num_train=64", "demo.num_eval=4",
        "demo.hidden_size=32", "rollout.prompts_per_step=2", "rollout.group_size=2", "trainer.max_steps=2")


def test_demo_task_tool_on_the_command_line_starts_from_the_tool_demo_config():
    config = load_config(None, ["demo.task=tool", "trainer.max_steps=7"])
    assert config.demo.task == "tool" and config.trainer.max_steps == 7
    assert config.rollout.multi_turn.tools == DEMO_TOOL_CONFIG["rollout"]["multi_turn"]["tools"] and config.rollout.multi_turn.enabled
    assert config.rollout.multi_turn.max_turns == DEMO_TOOL_CONFIG["rollout"]["multi_turn"]["max_turns"]
    reverse = load_config(None, [])
    assert reverse.demo.task == "reverse" and not reverse.rollout.multi_turn.enabled


def test_tool_demo_without_the_calculator_is_refused(tmp_path):
    from steadyrl.assembly.demo import demo_task

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"demo": {"task": "tool"}}))
    with pytest.raises(ConfigError, match=r"rollout\.multi_turn\.tools"):
        demo_task(load_config(path))


@pytest.fixture(scope="module")
def tool_run(steadyrl_cli, tmp_path_factory):
    """``(train's CompletedProcess, run directory)``: the tool demo trained once for this file's tests
    (each of two tests trained the same run before, 10-27 s apiece)."""
    out = tmp_path_factory.mktemp("tool_demo") / "run"
    return steadyrl_cli("train", "demo.task=tool", "--output-dir", str(out), *FAST, timeout=300), out


def test_tool_demo_trains_a_few_steps_and_shows_transcripts(tool_run):
    proc, out = tool_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "warm-start (skill 4 steps" in text and "preference 2 steps" in text
    for when in ("before", "after"):
        block = text.split(f"held-out transcript {when} RL:\n", 1)[1]
        assert block.startswith("  user: What is ") and "\n  assistant: " in block
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "rollout/turns_mean" in r] == [1, 2]
    for r in rows:  # the calculator answers within its time limit, its fresh workers' start not counted:
        if "rollout/turns_mean" in r:  # no call ran out of the turn's budget (the demo once ran at 60 s a step)
            assert r.get("rollout/tool_errors/time_budget", 0) == 0 and r.get("rollout/tool_errors/max_calls", 0) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["demo"]["task"] == "tool" and saved["rollout"]["multi_turn"]["tools"] == ["steadyrl.demo.calculator:calculate"]


def test_built_in_tools_are_the_tool_demos_and_need_no_trust_flag(steadyrl_cli, tool_run):
    from steadyrl.run.trust import BUILTIN_TOOLS

    assert BUILTIN_TOOLS == set(DEMO_TOOL_CONFIG["rollout"]["multi_turn"]["tools"])
    trained, out = tool_run
    assert trained.returncode == 0, trained.stderr[-3000:]
    proc = steadyrl_cli("eval", "--output-dir", str(out), timeout=300)  # steadyrl's own calculator: no flag
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["num_prompts"] == 4
