"""Ctrl-C in a run says how to continue it; the command it gives works from another directory
(reward files given relative to the launch directory are saved by absolute path); and the
resumed run's progress counts the run's own steps (3/4), not the ones left (1/2)."""

from __future__ import annotations

import re
import shlex

import yaml

from steadyrl import cli
from steadyrl import recipe as loop


def _interrupt_at(monkeypatch, stop_step: int) -> None:
    real = loop.train_step

    def train_step(run, engine, step):
        if step == stop_step:
            raise KeyboardInterrupt
        return real(run, engine, step)

    monkeypatch.setattr(loop, "train_step", train_step)


def test_ctrl_c_names_the_resume_command_which_works_from_another_directory(
        tiny_run, tmp_path, monkeypatch, capsys):
    launch, elsewhere = tmp_path / "launch", tmp_path / "elsewhere"
    launch.mkdir(), elsewhere.mkdir()
    (launch / "my_rewards.py").write_text((tiny_run.root / "rewards.py").read_text())
    out = tmp_path / "run"
    monkeypatch.chdir(launch)
    _interrupt_at(monkeypatch, 3)
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(out), "trainer.max_steps=4",
                     "trainer.save_every=2", "rewards=[{name: 'my_rewards.py:reverse_match'}]"])
    err = capsys.readouterr().err
    assert code == 130
    line = err.strip().splitlines()[-1]
    command = f"steadyrl train --output-dir {out} --resume"
    assert line == (f"steadyrl: interrupted; to continue from its newest checkpoint "
                    f"({out / 'checkpoints' / 'step_000002'}), run: {command}")
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["rewards"][0]["name"] == f"{launch / 'my_rewards.py'}:reverse_match"

    monkeypatch.undo()  # the real train_step, and back to the test's directory
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("STEADYRL_NO_PROGRESS", "1")  # progress as lines, on stderr
    assert cli.main(shlex.split(command)[1:]) == 0
    err = capsys.readouterr().err
    counts = re.findall(r"^\[train\] (\d+/\d+)", err, re.M)
    assert counts and counts[0] == "3/4" and counts[-1] == "4/4", err


def test_ctrl_c_before_the_first_checkpoint_says_the_run_starts_again(tiny_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    _interrupt_at(monkeypatch, 2)
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(out), "trainer.max_steps=4"])
    assert code == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (f"steadyrl: interrupted; no checkpoint was saved yet (trainer.save_every = 0); "
                    f"`steadyrl train --output-dir {out} --resume` starts the run again from step 0 with "
                    "its saved config.yaml")
