"""The 19 multi-turn keys moved from ``rollout`` to ``rollout.multi_turn`` (steadyrl/config/renamed.py):
an old name reads as its new one, with one deprecation note; a config or a run's saved config.yaml in
the old shape loads to the same config; an old name beside its new one is an error naming both."""

from __future__ import annotations

import pytest
import yaml

from steadyrl.config import config_notes, load_config
from steadyrl.config.loading import dump_config
from steadyrl.config.renamed import MULTI_TURN_KEYS, renamed_copy
from steadyrl.errors import ConfigError

VALUES = {  # a value other than the default for each old key (as a command-line override writes it)
    "tools": "[steadyrl.demo.calculator:calculate]", "tool_parser": "llama3_json", "environment": "env.py:Game",
    "agent": "agent.py:run_episode", "agent_concurrency": "3", "agent_timeout_s": "7.5", "observation_role": "tool",
    "turn_reward": "last", "max_turns": "3", "max_observation_tokens": "33", "observation_truncation": "left",
    "max_episode_tokens": "99", "tool_timeout_s": "4.5", "max_tool_calls_per_turn": "2", "tool_time_budget_s": "9.0",
    "tool_isolation": "thread", "tool_workers": "3", "tool_limits": "{memory_mb: 512}", "multi_turn_mode": "stepwise",
}


def _deprecations(config) -> list[str]:
    return [n for n in config_notes(config) if "deprecated" in n]


def test_every_old_key_is_listed_once_with_its_new_name():
    assert sorted(VALUES) == sorted(MULTI_TURN_KEYS) and len(MULTI_TURN_KEYS) == 19
    assert MULTI_TURN_KEYS["multi_turn_mode"] == "mode"
    assert all(new == old for old, new in MULTI_TURN_KEYS.items() if old != "multi_turn_mode")


@pytest.mark.parametrize("old", sorted(VALUES))
def test_an_old_key_reads_as_its_new_key_with_a_note(old):
    new = MULTI_TURN_KEYS[old]
    by_old = load_config(None, [f"rollout.{old}={VALUES[old]}"])
    by_new = load_config(None, [f"rollout.multi_turn.{new}={VALUES[old]}"])
    assert by_old.model_dump() == by_new.model_dump() != load_config(None, []).model_dump()
    assert f"rollout.multi_turn.{new}" in by_old._written  # the user's own key, under its new name
    assert not _deprecations(by_new)
    notes = _deprecations(by_old)
    assert len(notes) == 1 and f"rollout.{old} -> rollout.multi_turn.{new}" in notes[0]


def test_a_config_file_in_the_old_shape_loads_to_the_same_config_with_one_note(tmp_path):
    config = load_config(None, ["demo.task=tool", "rollout.multi_turn.mode=stepwise", "rollout.multi_turn.max_turns=3"])
    raw = yaml.safe_load(dump_config(config))
    old = dict(raw["rollout"])
    for key, value in old.pop("multi_turn").items():
        old["multi_turn_mode" if key == "mode" else key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**raw, "rollout": old}))
    loaded = load_config(str(path), [])
    assert loaded.model_dump() == config.model_dump()
    notes = _deprecations(loaded)
    assert len(notes) == 1 and all(f"rollout.{k} -> " in notes[0] for k in MULTI_TURN_KEYS)
    assert "multi_turn:" in dump_config(loaded) and "\n  max_turns:" not in dump_config(loaded)


def test_an_old_key_beside_its_new_name_is_an_error_naming_both():
    with pytest.raises(ConfigError, match=r"rollout.max_turns and rollout.multi_turn.max_turns are both set"):
        load_config(None, ["rollout.max_turns=3", "rollout.multi_turn.max_turns=4"])
    with pytest.raises(ConfigError, match=r"rollout.multi_turn_mode and rollout.multi_turn.mode are both set"):
        load_config(None, ["rollout.multi_turn_mode=single", "rollout.multi_turn.mode=stepwise"])
    # an old key beside other new ones is merged into the section
    both = load_config(None, ["rollout.max_turns=3", "rollout.multi_turn.max_observation_tokens=40"])
    assert (both.rollout.multi_turn.max_turns, both.rollout.multi_turn.max_observation_tokens) == (3, 40)


def test_an_old_key_beside_a_multi_turn_value_that_is_no_section_is_an_error():
    with pytest.raises(ConfigError, match=r"rollout.multi_turn = 3 is the section .* rollout.max_turns"):
        load_config(None, ["rollout.multi_turn=3", "rollout.max_turns=2"])


def test_a_bad_value_under_an_old_key_is_reported_under_the_new_one():
    with pytest.raises(ConfigError, match=r"rollout.multi_turn.max_turns"):
        load_config(None, ["rollout.max_turns=0"])


def test_the_section_is_no_flag():
    """``rollout.multi_turn`` was a true/false property before it was a section: asking a section
    whether it is true would always say yes, so the question is refused, naming what to read."""
    config = load_config(None, [])
    assert config.rollout.multi_turn.enabled is False
    assert load_config(None, ["demo.task=tool"]).rollout.multi_turn.enabled is True
    with pytest.raises(TypeError, match=r"rollout.multi_turn.enabled"):
        bool(config.rollout.multi_turn)


def test_renamed_copy_leaves_the_saved_config_as_it_was():
    saved = {"rollout": {"tools": ["x.py:f"], "multi_turn_mode": "single"}}
    copy = renamed_copy(saved)
    assert copy == {"rollout": {"multi_turn": {"tools": ["x.py:f"], "mode": "single"}}}
    assert saved == {"rollout": {"tools": ["x.py:f"], "multi_turn_mode": "single"}}
    conflicting = {"rollout": {"tools": ["x.py:f"], "multi_turn": {"tools": []}}}
    assert renamed_copy(conflicting) == conflicting  # refused when loaded; the copy keeps both as written


def test_config_show_of_an_old_config_prints_the_note_and_the_new_names(tmp_path, capsys):
    from steadyrl import cli

    path = tmp_path / "old.yaml"
    path.write_text("rollout:\n  max_turns: 3\n  tools: [steadyrl.demo.calculator:calculate]\n")
    assert cli.main(["config", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "rollout.max_turns -> rollout.multi_turn.max_turns" in out and "rollout.tools -> rollout.multi_turn.tools" in out
    shown = yaml.safe_load(out)
    assert shown["rollout"]["multi_turn"]["max_turns"] == 3 and "max_turns" not in shown["rollout"]


def test_the_doctor_quotes_a_setting_of_an_old_run_under_its_new_name(tmp_path):
    from steadyrl.doctor.run import load_run

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    (tmp_path / "config.yaml").write_text("rollout:\n  agent: agent.py:run_episode\n  agent_timeout_s: 42.0\n")
    run = load_run(tmp_path)
    assert run.setting("rollout.multi_turn.agent_timeout_s") == " (now 42.0)"


def _old_run_config(tmp_path, **overrides):
    """A config.yaml as steadyrl before 0.1.0 wrote it into a run directory: every key, the multi-turn ones
    directly under ``rollout``."""
    raw = yaml.safe_load(dump_config(load_config(None, ["demo.task=tool"])))
    old = dict(raw["rollout"])
    for key, value in old.pop("multi_turn").items():
        old["multi_turn_mode" if key == "mode" else key] = value
    old.update(overrides)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**raw, "rollout": old}))
    return path


def test_a_command_line_key_in_the_new_name_replaces_an_old_run_s_value_in_the_old_name(tmp_path):
    """Resuming a run saved before 0.1.0 (its config.yaml names every key, the old way) with an override
    written the new way, as the note asks: the override wins, as an override always did; no 'both set'."""
    path = _old_run_config(tmp_path)
    config = load_config(str(path), ["rollout.multi_turn.max_turns=5", "rollout.multi_turn.mode=stepwise",
                                     "rollout.multi_turn.tool_limits.memory_mb=700"])
    mt = config.rollout.multi_turn
    assert (mt.max_turns, mt.mode, mt.tool_limits.memory_mb) == (5, "stepwise", 700)
    assert mt.tools == ["steadyrl.demo.calculator:calculate"]  # the file's other old keys still read
    assert len(_deprecations(config)) == 1


def test_a_command_line_key_in_the_old_name_replaces_a_new_run_s_value(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(load_config(None, ["demo.task=tool"])))
    config = load_config(str(path), ["rollout.max_turns=5", "rollout.multi_turn_mode=stepwise"])
    assert (config.rollout.multi_turn.max_turns, config.rollout.multi_turn.mode) == (5, "stepwise")
    notes = _deprecations(config)
    assert len(notes) == 1 and "rollout.max_turns -> rollout.multi_turn.max_turns" in notes[0]


def test_an_old_key_beside_its_new_name_in_one_file_is_still_an_error(tmp_path):
    path = _old_run_config(tmp_path, multi_turn={"max_turns": 4})
    with pytest.raises(ConfigError, match=r"rollout.max_turns and rollout.multi_turn.max_turns are both set"):
        load_config(str(path), [])


def test_the_code_a_command_line_tool_replaces_is_not_loaded_nor_judged_the_run_s(tmp_path):
    """An old run's tools replaced on the command line under the new name: the config holds the user's
    tools only, so the trust rule finds nothing of the file's to refuse, and nothing of it is loaded."""
    from steadyrl.run.trust import run_code

    path = _old_run_config(tmp_path, tools=["theirs.py:evil"])
    config = load_config(str(path), ["rollout.multi_turn.tools=[mine.py:tool]"])
    assert config.rollout.multi_turn.tools == ["mine.py:tool"]
    assert run_code(config, yaml.safe_load(path.read_text())) == []
    kept = load_config(str(path), [])  # without the override the file's tool is judged, under its old name
    assert run_code(kept, yaml.safe_load(path.read_text())) == ["tool 'theirs.py:evil'"]


def _old_run_dir_config(tmp_path, marker: str | None, *overrides: str):
    """A run directory's config.yaml as steadyrl before 0.1.0 wrote it: the line naming the keys the user
    wrote (old names), the whole config with the multi-turn keys under ``rollout``, the hash line."""
    from steadyrl.config.inert import WRITTEN_MARKER
    from steadyrl.run.directory import with_hash_line

    raw = yaml.safe_load(dump_config(load_config(None, list(overrides))))
    old = dict(raw["rollout"])
    for key, value in old.pop("multi_turn").items():
        old["multi_turn_mode" if key == "mode" else key] = value
    body = yaml.safe_dump({**raw, "rollout": old}, sort_keys=False)
    path = tmp_path / "config.yaml"
    path.write_text(with_hash_line(body) if marker is None else with_hash_line(f"{WRITTEN_MARKER} {marker}\n" + body))
    return path


@pytest.mark.parametrize("marker, overrides, written", [
    ("algorithm.kl_coef", ["algorithm.kl_coef=0.01"], {"algorithm.kl_coef"}),
    ("demo.task rollout.max_turns", ["demo.task=tool", "rollout.multi_turn.max_turns=3"],
     {"demo.task", "rollout.multi_turn.max_turns"}),
    ("demo.task rollout.multi_turn_mode", ["demo.task=tool", "rollout.multi_turn.mode=stepwise"],
     {"demo.task", "rollout.multi_turn.mode"}),
])
def test_an_old_run_s_written_keys_are_the_ones_its_marker_names_under_their_new_names(tmp_path, marker, overrides,
                                                                                       written):
    """Before: every multi-turn key of an old run's config.yaml (all of them: it is a whole config) counted
    as written by the user, so its resume wrote them all on its own marker line and notes would name them."""
    config = load_config(str(_old_run_dir_config(tmp_path, marker, *overrides)), [])
    assert set(config._written) == written


def test_an_old_whole_config_without_its_marker_counts_the_keys_that_differ_from_the_defaults(tmp_path):
    path = _old_run_dir_config(tmp_path, None, "algorithm.kl_coef=0.01", "rollout.multi_turn.max_turns=3")
    path.write_text(path.read_text().rsplit("# steadyrl-sha256:", 1)[0])  # a copy edited since: no hash line
    config = load_config(str(path), [])
    assert {k for k in config._written if "multi_turn" in k} == {"rollout.multi_turn.max_turns"}


@pytest.mark.parametrize("typed, meant", [
    ("rollout.max_turn=3", "rollout.multi_turn.max_turns"),  # a typo of an old name: before, 'rollout.max_turns'
    ("rollout.tool=[x.py:f]", "rollout.multi_turn.tools"),
    ("rollout.multi_turn_modes=single", "rollout.multi_turn.mode"),
    ("rollout.multi_turn.multi_turn_mode=single", "rollout.multi_turn.mode"),  # the old name inside the section
    ("rollout.multi_turn.max_turn=3", "rollout.multi_turn.max_turns"),
])
def test_a_close_miss_of_a_multi_turn_key_suggests_its_new_name(typed, meant):
    """Before: 'rollout.max_turn' got "did you mean 'rollout.multi_turn'?" (the section's own name)."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [typed])
    assert f"did you mean {meant!r}?" in str(err.value), str(err.value)


@pytest.mark.parametrize("typed", ["rollout.multi_turn.enable=true", "rollout.multi_turn.enabled=true"])
def test_switching_multi_turn_on_by_a_flag_names_the_three_keys_that_do(typed):
    """``rollout.multi_turn.enabled`` is read, not written; before, it got "did you mean 'model.lora.enabled'?"
    and verl's ``enable`` a hint without the agent."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [typed])
    said = str(err.value)
    assert all(f"rollout.multi_turn.{k}" in said for k in ("tools", "environment", "agent")), said
    assert "lora" not in said
