"""One rule for every command that reads a run directory or a config it did not start (issue "Trust,
round 4" item 2 and issue 42 item 7; steadyrl/run/trust.py): the code such a config names - a reward
file, tools, an environment, a tool parser, an agent, the model's own files - is refused without
``--trust-run-code``, with or without the ``.steadyrl-run`` marker, unless this user's record says
train wrote that very config.yaml here. Each test plants a file that leaves a trace when imported.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest
import yaml

from steadyrl import cli
from steadyrl.config import load_config
from steadyrl.errors import ConfigError
from steadyrl.run.directory import MARKER, write_run_config
from steadyrl.run.start import load_run_config
from steadyrl.run.trust import TRUST_DIR_VAR, check_config_code, check_run_code, is_own_config, record_own_config

PAYLOAD = "import pathlib\npathlib.Path({trace!r}).write_text('ran')\n"
BODIES = {
    "reward": "def score(prompts, completions, **kw):\n    return [1.0] * len(completions)\n",
    "tools": 'def add(a: int, b: int) -> int:\n    """Add.\n\n    Args:\n        a: one\n        b: two\n    """\n'
             "    return a + b\n",
    "environment": "class Game:\n    def reset(self, **row):\n        return None\n\n"
                   "    def step(self, text):\n        return '', 0.0, True\n",
    "tool_parser": "class Parser:\n    def parse(self, text):\n        return text, []\n",
    "agent": "def run_episode(row, client):\n    return None\n",
}
ITEMS = {  # the config key naming each planted file, as a config.yaml holds it
    "reward": lambda f: {"rewards": [{"name": f"{f}:score"}]},
    "tools": lambda f: {"rollout": {"multi_turn": {"tools": [f"{f}:add"]}}},
    "environment": lambda f: {"rollout": {"multi_turn": {"environment": f"{f}:Game"}}},
    "tool_parser": lambda f: {"rollout": {"multi_turn": {"tool_parser": f"{f}:Parser"}}},
    "agent": lambda f: {"rollout": {"multi_turn": {"agent": f"{f}:run_episode"}}},
}


@pytest.fixture(autouse=True)
def own_store(tmp_path, monkeypatch):
    """A trust store of this test's own: nothing recorded unless the test records it."""
    monkeypatch.setenv(TRUST_DIR_VAR, str(tmp_path / "trust"))
    return tmp_path / "trust"


def _plant(tmp_path, kind):
    trace = tmp_path / f"{kind}-ran"
    code = tmp_path / f"{kind}_code.py"
    code.write_text(PAYLOAD.format(trace=str(trace)) + BODIES[kind])
    return code, trace


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def _old_shape(saved: dict) -> dict:
    """``saved`` as a config.yaml written before the multi-turn keys moved under rollout.multi_turn."""
    rollout = dict(saved["rollout"])
    for key, value in rollout.pop("multi_turn").items():
        rollout["multi_turn_mode" if key == "mode" else key] = value
    return {**saved, "rollout": rollout}


def _config_file(tiny_run, folder, kind, code, marker=False, old_names=False):
    """``folder/config.yaml`` of the tiny run plus the key naming ``code``; the run marker if asked;
    ``old_names``: the multi-turn keys where steadyrl before 0.1.0 wrote them (rollout.tools, ...)."""
    folder.mkdir(parents=True, exist_ok=True)
    saved = _merge(yaml.safe_load(tiny_run.config.read_text()), ITEMS[kind](code))
    saved = _old_shape(saved) if old_names else saved
    (folder / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    if marker:
        (folder / MARKER).write_text('{"steadyrl_run": 1}')
    return folder / "config.yaml"


def _run_dir(tiny_run, tmp_path, kind, code, name="run"):
    """A run directory as train writes it (config.yaml with its hash line, the marker), not recorded."""
    path = _config_file(tiny_run, tmp_path / "src", kind, code)
    run = tmp_path / name
    run.mkdir()
    write_run_config(load_config(str(path), []), run)
    (run / MARKER).write_text('{"steadyrl_run": 1}')
    return run


@pytest.mark.parametrize("marker", [False, True], ids=["no-marker", "marker"])
@pytest.mark.parametrize("kind", sorted(ITEMS))
def test_doctor_refuses_every_code_a_config_names_marker_or_not(tiny_run, tmp_path, capsys, kind, marker):
    code, trace = _plant(tmp_path, kind)
    path = _config_file(tiny_run, tmp_path / "theirs", kind, code, marker=marker)
    assert cli.main(["doctor", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--trust-run-code" in err and str(code) in err, err
    assert not trace.exists()


@pytest.mark.parametrize("kind", ["tools", "environment", "tool_parser", "agent"])
def test_a_config_with_the_old_multi_turn_key_names_is_held_to_the_same_rule(tiny_run, tmp_path, capsys, kind):
    """A config.yaml in the shape steadyrl wrote before 0.1.0 (rollout.tools, rollout.environment, ...)
    still loads, its keys read under rollout.multi_turn: the code it names is refused the same way."""
    code, trace = _plant(tmp_path, kind)
    path = _config_file(tiny_run, tmp_path / "theirs", kind, code, old_names=True)
    assert "multi_turn" not in yaml.safe_load(path.read_text())["rollout"]
    assert cli.main(["doctor", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--trust-run-code" in err and str(code) in err, err
    assert not trace.exists()
    from steadyrl.run.directory import with_hash_line

    run = tmp_path / "run"  # a run directory as such a version wrote it, its config's hash line included
    run.mkdir()
    (run / "config.yaml").write_text(with_hash_line(path.read_text()))
    (run / MARKER).write_text('{"steadyrl_run": 1}')
    assert cli.main(["eval", "--output-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "--trust-run-code" in err and str(code) in err, err
    assert not trace.exists()


def test_train_resume_of_a_run_not_recorded_as_mine_needs_the_flag(tiny_run, tmp_path, capsys):
    code, trace = _plant(tmp_path, "reward")
    run = _run_dir(tiny_run, tmp_path, "reward", code)
    assert cli.main(["train", "--resume", "--output-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "--resume --output-dir" in err and "--trust-run-code" in err and "reward" in err, err
    assert not trace.exists()
    with pytest.raises(ConfigError, match="--trust-run-code"):  # the library path keeps the same rule
        load_run_config(None, [], output_dir=str(run), resume=True)
    load_run_config(None, [], output_dir=str(run), resume=True, trust_run_code=True)


def test_train_resume_naming_the_runs_own_config_is_held_to_the_rule_too(tiny_run, tmp_path, capsys):
    code, trace = _plant(tmp_path, "tools")
    run = _run_dir(tiny_run, tmp_path, "tools", code)
    for named in (run / "config.yaml", tmp_path / "." / "run" / ".." / "run" / "config.yaml"):
        assert cli.main(["train", str(named), "--resume", "--output-dir", str(run)]) == 2
        assert "--trust-run-code" in capsys.readouterr().err and not trace.exists()


def test_a_run_train_recorded_resumes_without_the_flag_until_its_config_changes(tiny_run, tmp_path, capsys):
    code, _ = _plant(tmp_path, "reward")
    run = _run_dir(tiny_run, tmp_path, "reward", code)
    record_own_config(run / "config.yaml")  # what train does when it writes the run's config.yaml
    config = load_run_config(None, [], output_dir=str(run), resume=True)
    assert config.rewards[0].name == f"{code}:score"
    copy = tmp_path / "moved"  # the user's own run, moved or copied: the same bytes, still theirs
    shutil.copytree(run, copy)
    load_run_config(None, [], output_dir=str(copy), resume=True)
    saved = yaml.safe_load((copy / "config.yaml").read_text())  # changed since: the record no longer matches
    saved["rewards"][0]["name"] = f"{tmp_path / 'other.py'}:score"
    write_run_config(load_config(None, [f"rewards=[{{name: {saved['rewards'][0]['name']}}}]"]), copy)
    assert not is_own_config(copy / "config.yaml")
    with pytest.raises(ConfigError, match="--trust-run-code"):
        load_run_config(None, [], output_dir=str(copy), resume=True)


def test_a_record_others_can_write_grants_nothing(tiny_run, tmp_path, own_store):
    code, _ = _plant(tmp_path, "reward")
    run = _run_dir(tiny_run, tmp_path, "reward", code)
    record_own_config(run / "config.yaml")
    record = next(own_store.iterdir())
    assert is_own_config(run / "config.yaml")
    record.chmod(0o666)
    assert not is_own_config(run / "config.yaml")


def test_train_records_the_config_it_writes(tiny_run, tmp_path):
    run = tmp_path / "run"
    assert cli.main(["train", str(tiny_run.config), "--output-dir", str(run), "trainer.max_steps=1"]) == 0
    assert is_own_config(run / "config.yaml")


@pytest.mark.parametrize("kind", ["reward", "tools"])
def test_eval_of_a_run_dir_follows_the_same_rule(tiny_run, tmp_path, capsys, kind):
    code, trace = _plant(tmp_path, kind)
    run = _run_dir(tiny_run, tmp_path, kind, code)
    assert cli.main(["eval", "--output-dir", str(run)]) == 2
    assert "--trust-run-code" in capsys.readouterr().err and not trace.exists()
    record_own_config(run / "config.yaml")  # the user's own run: past the rule, to the next check
    assert cli.main(["eval", "--output-dir", str(run)]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_export_merge_of_a_run_with_model_code_follows_the_same_rule(tiny_run, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    saved = yaml.safe_load(tiny_run.config.read_text())
    saved["model"]["trust_remote_code"] = True
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    out = tmp_path / "out"
    assert cli.main(["export", str(run), str(out), "--merge-lora"]) == 2
    assert "model.trust_remote_code" in capsys.readouterr().err
    record_own_config(run / "config.yaml")
    assert cli.main(["export", str(run), str(out), "--merge-lora"]) == 2
    err = capsys.readouterr().err
    assert "--trust-run-code" not in err and "checkpoint" in err, err


@pytest.mark.parametrize("argv", [["plot", "{run}", "--out", "{tmp}/p.png"], ["doctor", "{run}"],
                                  ["config", "show", "{run}/config.yaml"]], ids=["plot", "doctor-run", "config-show"])
@pytest.mark.parametrize("kind", sorted(ITEMS))
def test_reading_commands_import_nothing_a_run_dir_names(tiny_run, tmp_path, capsys, argv, kind):
    code, trace = _plant(tmp_path, kind)
    run = _run_dir(tiny_run, tmp_path, kind, code)
    cli.main([a.format(run=run, tmp=tmp_path) for a in argv])  # its exit status is its own business
    assert not trace.exists()


def test_the_rule_names_what_it_refuses(tiny_run, tmp_path):
    code, _ = _plant(tmp_path, "environment")
    path = _config_file(tiny_run, tmp_path / "theirs", "environment", code)
    with pytest.raises(ConfigError) as err:
        check_config_code(load_config(str(path), []), path, False, who="doctor 'x'", instead="or not")
    message = str(err.value)
    assert message.startswith("doctor 'x': ") and f"environment '{code}:Game'" in message
    assert "reward" in message  # the tiny run's own reward file counts too


def test_the_teachers_own_files_count_as_code_too(tiny_run, tmp_path, capsys):
    """``teacher.trust_remote_code`` imports the teacher's own Python files (a hub repo or directory
    the config names) as ``model.trust_remote_code`` does the policy's: refused without the flag."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    saved = yaml.safe_load(tiny_run.config.read_text())
    saved["rewards"] = [{"name": "exact_match"}]  # the teacher's files the only code it names
    (folder / "plain.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    saved["teacher"] = {"name_or_path": str(tmp_path / "their-teacher"), "trust_remote_code": True}
    (folder / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    path = folder / "config.yaml"
    with pytest.raises(ConfigError, match="teacher.trust_remote_code"):
        check_config_code(load_config(str(path), []), path, False, who="doctor 'x'", instead="or not")
    assert cli.main(["doctor", str(path)]) == 2
    assert "teacher.trust_remote_code" in capsys.readouterr().err
    check_config_code(load_config(str(path), []), path, True, who="doctor 'x'", instead="or not")
    # set on the command line: the user's own choice
    check_config_code(load_config(str(folder / "plain.yaml"), [f"teacher.name_or_path={tmp_path / 't'}",
                                                               "teacher.trust_remote_code=true"]),
                      folder / "plain.yaml", False, who="doctor 'x'", instead="or not")


def test_the_config_checked_is_the_config_loaded(tiny_run, tmp_path):
    """A config.yaml swapped between its load and its check (the attacker's bytes loaded, the user's
    own recorded bytes then in place when they are hashed and read again) is judged by the bytes it
    was loaded from, not by whatever the path holds later."""
    code, trace = _plant(tmp_path, "reward")
    mine = _run_dir(tiny_run, tmp_path, "reward", code, name="mine")
    record_own_config(mine / "config.yaml")
    their_code, _ = _plant(tmp_path, "tools")
    theirs = _run_dir(tiny_run, tmp_path, "tools", their_code, name="theirs")
    config = load_config(str(theirs / "config.yaml"), [])  # the attacker's bytes, loaded
    shutil.copyfile(mine / "config.yaml", theirs / "config.yaml")  # then the user's own recorded bytes
    assert is_own_config(theirs / "config.yaml")
    with pytest.raises(ConfigError, match="--trust-run-code"):
        check_config_code(config, theirs / "config.yaml", False, who="eval", instead="or not")
    # the swap the other way: loaded from the user's own bytes, then the path holds others'
    config = load_config(str(mine / "config.yaml"), [])
    shutil.copyfile(theirs / "config.yaml", tmp_path / "keep.yaml")
    check_config_code(config, mine / "config.yaml", False, who="eval", instead="or not")


def test_a_copy_of_my_config_in_a_directory_others_write_does_not_vouch_for_the_models_files(
        tiny_run, tmp_path, capsys):
    """``model.trust_remote_code`` names no file: it imports the Python files of the model loaded,
    and ``eval --output-dir`` / ``train --resume`` load it from the run directory's checkpoints. The
    record vouches for the config's bytes, so a copy of the user's own config (trust_remote_code:
    true) put in a directory someone else can write, next to their checkpoint and its modelling
    code, would run that code without the flag. The record holds for the model's files only where
    the directory is this user's and no one else can write it."""
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    saved = yaml.safe_load(tiny_run.config.read_text())
    saved["rewards"] = [{"name": "exact_match"}]
    saved["model"]["trust_remote_code"] = True
    (mine / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    record_own_config(mine / "config.yaml")
    mine.chmod(0o755)
    check_run_code(load_config(str(mine / "config.yaml"), []), mine, False)  # my own run: as before
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    shutil.copyfile(mine / "config.yaml", theirs / "config.yaml")  # the same bytes: recorded as mine
    theirs.chmod(0o777)  # a directory others write (their checkpoints, their modelling files)
    assert is_own_config(theirs / "config.yaml")
    with pytest.raises(ConfigError, match="model.trust_remote_code"):
        check_run_code(load_config(str(theirs / "config.yaml"), []), theirs, False)
    with pytest.raises(ConfigError, match="model.trust_remote_code"):
        load_run_config(None, [], output_dir=str(theirs), resume=True)
    check_run_code(load_config(str(theirs / "config.yaml"), []), theirs, True)  # the flag: the user's word
    if os.getuid() == 0:  # a directory of another user's, not writable by others
        theirs.chmod(0o755)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(ConfigError, match="model.trust_remote_code"):
            check_run_code(load_config(str(theirs / "config.yaml"), []), theirs, False)


def test_records_in_a_store_others_can_write_grant_nothing(tiny_run, tmp_path, own_store):
    """A record is the user's own file, but its name is what says which bytes it vouches for: in a
    store directory others can write (``$STEADYRL_TRUST_DIR`` / ``$XDG_STATE_HOME`` on a shared
    path) another user renames the user's record of one config to the hash of their own."""
    code, _ = _plant(tmp_path, "reward")
    mine = _run_dir(tiny_run, tmp_path, "reward", code, name="mine")
    record_own_config(mine / "config.yaml")
    their_code, trace = _plant(tmp_path, "tools")
    theirs = _run_dir(tiny_run, tmp_path, "tools", their_code, name="theirs")
    record = next(own_store.iterdir())
    record.rename(own_store / hashlib.sha256((theirs / "config.yaml").read_bytes()).hexdigest())
    own_store.chmod(0o700)
    assert is_own_config(theirs / "config.yaml")  # a store of the user's alone: only the user renames
    own_store.chmod(0o777)
    assert not is_own_config(theirs / "config.yaml")
    with pytest.raises(ConfigError, match="--trust-run-code"):
        load_run_config(None, [], output_dir=str(theirs), resume=True)
    assert not trace.exists()


def test_train_records_the_bytes_it_wrote_not_what_the_path_holds_next(tiny_run, tmp_path, monkeypatch):
    """train hashed its config.yaml by reading it back: one swapped in right after the write (a run
    directory someone else can write) was recorded as the user's own, and its code then ran
    anywhere without the flag. The record is of the bytes train wrote."""
    from steadyrl.run import start

    their_code, trace = _plant(tmp_path, "reward")
    theirs = _run_dir(tiny_run, tmp_path, "reward", their_code, name="theirs")
    real = start.write_run_config

    def write_then_swapped(config, out):
        written = real(config, out)
        shutil.copyfile(theirs / "config.yaml", out / "config.yaml")  # the race, won
        return written

    monkeypatch.setattr(start, "write_run_config", write_then_swapped)
    run = tmp_path / "run"
    cli.main(["train", str(tiny_run.config), "--output-dir", str(run), "trainer.max_steps=1"])
    assert (run / "config.yaml").read_bytes() == (theirs / "config.yaml").read_bytes()
    assert not is_own_config(theirs / "config.yaml")
    assert not trace.exists()
