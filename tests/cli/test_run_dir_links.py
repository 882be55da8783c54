"""One rule for every command (issue 30, item 7): steadyrl never follows a link inside a run
directory, reading or writing; it stops with exit 2 naming the link, and the file the link points
to is unchanged. The doctor's and plot's cases are in tests/doctor/test_hostile_run_files.py,
export's in test_export_links.py; here: train (its closing report.md), resume and eval reading
the run's state, config and checkpoints."""

from __future__ import annotations

import shutil

import pytest

from .test_run_directory import _fails_with, _snapshot, finished_run, run_copy  # noqa: F401  (fixtures)


def test_train_refuses_a_report_md_link_before_writing_anything(tiny_run, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAA mine\n")
    (out / "report.md").symlink_to(keys)
    _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(out)], "report.md", "symbolic link")
    assert keys.read_text() == "ssh-ed25519 AAAA mine\n"
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]


def test_resume_refuses_a_report_md_link(run_copy, tiny_run, tmp_path, capsys):  # noqa: F811
    keys = tmp_path / "authorized_keys"
    keys.write_text("mine\n")
    (run_copy / "report.md").unlink(missing_ok=True)
    (run_copy / "report.md").symlink_to(keys)
    _fails_with(capsys, ["train", "--resume", "--output-dir", str(run_copy), "trainer.max_steps=3"],
                "report.md", "symbolic link")
    assert keys.read_text() == "mine\n"


@pytest.mark.parametrize("name", ["policy/model.safetensors", "policy/config.json"])
def test_resume_and_eval_refuse_a_link_deep_in_a_checkpoint(run_copy, tmp_path, capsys, name):  # noqa: F811
    latest = sorted((run_copy / "checkpoints").iterdir())[-1]
    target = latest / name
    shutil.move(target, tmp_path / "someone_elses")
    target.symlink_to(tmp_path / "someone_elses")
    before = _snapshot(run_copy)
    _fails_with(capsys, ["train", "--resume", "--output-dir", str(run_copy), "trainer.max_steps=3"],
                str(target), "symbolic link")
    _fails_with(capsys, ["eval", "--output-dir", str(run_copy), "eval.num_samples=0"], str(target), "symbolic link")
    assert _snapshot(run_copy) == before


def test_eval_and_resume_do_not_read_a_config_yaml_link(run_copy, tmp_path, capsys):  # noqa: F811
    elsewhere = tmp_path / "someone_elses.yaml"
    shutil.move(run_copy / "config.yaml", elsewhere)
    (run_copy / "config.yaml").symlink_to(elsewhere)
    _fails_with(capsys, ["eval", "--output-dir", str(run_copy), "eval.num_samples=0"], "config.yaml", "symbolic link")
    _fails_with(capsys, ["train", "--resume", "--output-dir", str(run_copy)], "config.yaml", "symbolic link")


def test_export_does_not_read_a_config_yaml_link(run_copy, tmp_path, capsys):  # noqa: F811
    elsewhere = tmp_path / "someone_elses.yaml"
    shutil.move(run_copy / "config.yaml", elsewhere)
    (run_copy / "config.yaml").symlink_to(elsewhere)
    _fails_with(capsys, ["export", str(run_copy), str(tmp_path / "out")], "config.yaml", "symbolic link")
    assert not (tmp_path / "out").exists()
