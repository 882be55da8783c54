"""Reading a config someone else wrote never imports or runs its code (issue 30, item 8).

* ``steadyrl doctor RUN/config.yaml`` loads the model: a file that sets ``model.trust_remote_code``
  needs ``--trust-run-code``, with or without the run directory's ``.steadyrl-run`` marker (a file
  the run's author controls, so its absence grants nothing).
* ``steadyrl config show CONFIG`` checks ``rollout.multi_turn.tools`` and ``rollout.multi_turn.environment`` without
  importing the files they name; ``--trust-run-code`` loads them as train does.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from steadyrl import cli

PAYLOAD = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


@pytest.fixture
def foreign_run(tiny_run, tmp_path):
    """A folder with a config.yaml whose model runs its own code when trusted (no marker)."""
    model = tmp_path / "model"
    shutil.copytree(tiny_run.model, model)
    marker = tmp_path / "code-ran"
    (model / "configuration_evil.py").write_text(PAYLOAD.format(marker=str(marker)) +
                                                 "from transformers import GPT2Config as EvilConfig\n")
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig"}
    (model / "config.json").write_text(json.dumps(config))
    run = tmp_path / "run"
    run.mkdir()
    saved = yaml.safe_load(tiny_run.config.read_text())
    saved["model"].update(name_or_path=str(model), trust_remote_code=True)
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    return run, marker


@pytest.mark.parametrize("with_marker", [False, True])
def test_doctor_of_a_config_with_trust_remote_code_needs_the_flag(foreign_run, capsys, with_marker):
    run, marker = foreign_run
    if with_marker:
        (run / ".steadyrl-run").write_text('{"steadyrl_run": 1}')
    assert cli.main(["doctor", str(run / "config.yaml")]) == 2
    err = capsys.readouterr().err
    assert "model.trust_remote_code" in err and "--trust-run-code" in err
    assert not marker.exists()


def test_doctor_of_my_own_config_needs_no_flag_for_what_i_set(tiny_run, tmp_path, capsys):
    from steadyrl.config import load_config
    from steadyrl.run.trust import check_config_code

    saved = yaml.safe_load(tiny_run.config.read_text())
    del saved["rewards"]
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(saved))
    config = load_config(str(mine), [f"rewards=[{{name: {tiny_run.reward}}}]", "model.trust_remote_code=true"])
    # the reward file and trust_remote_code are set on the command line, none in the file: nothing to ask
    check_config_code(config, mine, False, who="doctor", instead="")


@pytest.fixture
def planted(tmp_path):
    marker = tmp_path / "imported"
    tools = tmp_path / "tools.py"
    tools.write_text(PAYLOAD.format(marker=str(marker)) +
                     'def add(a: int, b: int) -> int:\n    """Add.\n\n    Args:\n        a: one\n'
                     '        b: two\n    """\n    return a + b\n')
    env = tmp_path / "env.py"
    env.write_text(PAYLOAD.format(marker=str(marker)) +
                   "class Game:\n    def reset(self, **row):\n        return None\n\n"
                   "    def step(self, text):\n        return '', 0.0, True\n")
    return tools, env, marker


@pytest.mark.parametrize("key", ["tools", "environment"])
def test_config_show_imports_nothing_the_config_names(tiny_run, planted, capsys, key):
    tools, env, marker = planted
    item = f"rollout.multi_turn.tools=[{tools}:add]" if key == "tools" else f"rollout.multi_turn.environment={env}:Game"
    assert cli.main(["config", "show", str(tiny_run.config), item]) == 0, capsys.readouterr().err
    assert not marker.exists()
    assert cli.main(["config", "show", str(tiny_run.config), item, "--trust-run-code"]) == 0
    assert marker.exists()  # the full check loads them, when asked to


@pytest.mark.parametrize("item, said", [
    ("rollout.multi_turn.tools=[{tools}:sub]", "has no attribute 'sub'"),
    ("rollout.multi_turn.tools=[{tmp}/missing.py:add]", "does not exist"),
    ("rollout.multi_turn.tools=[{bad}:add]", "is not valid Python"),
    ("rollout.multi_turn.environment={env}:Nope", "has no attribute 'Nope'"),
])
def test_config_show_still_refuses_a_bad_spec_without_running_it(tiny_run, planted, tmp_path, capsys, item, said):
    tools, env, marker = planted
    bad = tmp_path / "bad.py"
    bad.write_text("def add(:\n")
    item = item.format(tools=tools, env=env, tmp=tmp_path, bad=bad)
    assert cli.main(["config", "show", str(tiny_run.config), item]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1
    assert not marker.exists()
