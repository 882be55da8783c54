"""A run directory is never damaged by a bad command: ``--overwrite`` and ``--resume`` check every
input before they touch it, ``--resume`` with no config continues with the run's own, and a
resume whose settings the checkpoint cannot continue from is refused, naming the key."""

from __future__ import annotations

import shutil

import pytest
import yaml

from steadyrl import cli


def _snapshot(run_dir) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tiny_run, tmp_path_factory):
    """A 2-step run with a checkpoint at each step."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert cli.main(["train", str(tiny_run.config), "--output-dir", str(out), "trainer.save_every=1"]) == 0
    return out


@pytest.fixture
def run_copy(finished_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    return out


def _fails_with(capsys, argv: list[str], *names: str) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for name in names:
        assert name in err, (name, err)
    return err


@pytest.mark.parametrize("bad", [
    "data.train_path=/no/such/file.jsonl",
    "rewards=[{name: no_such_reward}]",
    "model.name_or_path=/no/such/model",
])
def test_overwrite_with_a_bad_input_leaves_the_old_run_intact(run_copy, tiny_run, capsys, bad):
    before = _snapshot(run_copy)
    _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(run_copy), "--overwrite", bad])
    assert _snapshot(run_copy) == before


def test_a_refused_resume_leaves_the_run_and_its_config_as_they_were(run_copy, tiny_run, capsys):
    before = _snapshot(run_copy)
    _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(run_copy), "--resume",
                         "trainer.max_steps=4", "data.train_path=/no/such/file.jsonl"], "file.jsonl")
    assert _snapshot(run_copy) == before


@pytest.mark.parametrize("override,key", [
    ("model.name_or_path={root}/other_model", "model.name_or_path"),
    ("model.lora.enabled=true", "model.lora"),
    ("data.train_path={root}/eval.jsonl", "data.train_path"),
    ("rollout.prompts_per_step=2", "rollout.prompts_per_step"),
    ("algorithm.preset=ppo", "critic"),
])
def test_resume_with_settings_the_checkpoint_cannot_continue_is_refused(run_copy, tiny_run, capsys, override, key):
    other = tiny_run.root / "other_model"
    if not other.exists():
        shutil.copytree(tiny_run.model, other)
    before = _snapshot(run_copy)
    _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(run_copy), "--resume",
                         "trainer.max_steps=3", override.replace("{root}", str(tiny_run.root))], "--resume", key)
    assert _snapshot(run_copy) == before


def test_resume_without_a_config_continues_with_the_runs_own(run_copy, tiny_run, capsys):
    saved = yaml.safe_load((run_copy / "config.yaml").read_text())
    assert cli.main(["train", "--output-dir", str(run_copy), "--resume", "trainer.max_steps=3"]) == 0
    out = capsys.readouterr().out
    assert "resuming with the run's config" in out and "resumed from" in out
    assert f"the run's config loads reward '{tiny_run.reward}'" in out  # said, not asked: it is one's own run
    now = yaml.safe_load((run_copy / "config.yaml").read_text())
    assert now["model"] == saved["model"] and now["data"] == saved["data"]  # not the built-in demo's
    assert now["trainer"]["max_steps"] == 3
    assert not (run_copy / "warmstart").exists()


def test_resume_of_a_directory_without_checkpoints_says_it_starts_over(tiny_run, tmp_path, capsys):
    out = tmp_path / "fresh"
    assert cli.main(["train", str(tiny_run.config), "--output-dir", str(out), "--resume", "trainer.max_steps=1"]) == 0
    assert "no checkpoint" in capsys.readouterr().out


def test_one_reward_twice_under_two_labels_is_scored_and_logged_twice(tiny_run, tmp_path):
    from steadyrl.tracking import read_metrics

    out = tmp_path / "labelled"
    rewards = ("rewards=[{name: regex_format, label: starts_a, options: {pattern: '^a'}}, "
               "{name: regex_format, label: ends_a, options: {pattern: 'a$'}, weight: 0.5}]")
    assert cli.main(["train", str(tiny_run.config), "--output-dir", str(out), rewards, "trainer.max_steps=1"]) == 0
    step = [m for m in read_metrics(out) if m["step"] == 1][0]
    assert "reward/starts_a/failed" in step and "reward/ends_a/failed" in step


class _TouchOnLoad:
    """Unpickling it calls ``Path.touch(marker)``: what a hostile ``state.pt`` could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path

        return (Path.touch, (Path(self.marker),))


def test_resume_refuses_a_state_pt_whose_loading_would_run_code(run_copy, tiny_run, tmp_path, capsys):
    import torch

    marker = tmp_path / "code-ran"
    state = run_copy / "checkpoints" / "step_000002" / "state.pt"
    torch.save({"step": 2, "payload": _TouchOnLoad(marker)}, state)
    _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(run_copy), "--resume",
                         "trainer.max_steps=3"], "state.pt", "refused")
    assert not marker.exists()
