"""``steadyrl eval --completions FILE`` is checked before the model loads: the file is written only after
the whole evaluation, so a path it cannot write (a directory, a link) failed at the very end, the
evaluation's numbers unprinted; and a run's own record (metrics.jsonl, config.yaml) or the config being
evaluated must not be overwritten by completions (outside review b-doctor)."""

from __future__ import annotations

import os

import pytest

from steadyrl import cli


def _eval(items, capsys) -> tuple[int, str]:
    code = cli.main(["eval", *items])
    return code, capsys.readouterr().err


def test_a_directory_is_refused_before_loading(tmp_path, capsys):
    code, err = _eval(["--model", str(tmp_path / "no-model"), "--completions", str(tmp_path)], capsys)
    assert code == 2 and "--completions" in err and "is a directory" in err


def test_a_link_is_refused_before_loading(tmp_path, capsys):
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("keep\n")
    os.symlink(target, tmp_path / "c.jsonl")
    code, err = _eval(["--model", str(tmp_path / "no-model"), "--completions", str(tmp_path / "c.jsonl")], capsys)
    assert code == 2 and "--completions" in err and "link" in err
    assert target.read_text() == "keep\n"


@pytest.mark.parametrize("name", ["metrics.jsonl", "config.yaml", "samples.jsonl", ".steadyrl-run", "summary.json"])
def test_a_run_directorys_own_record_is_refused(tmp_path, capsys, name):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".steadyrl-run").write_text('{"steadyrl_run": 1}\n')
    (run / name).write_text("the run's own\n")
    code, err = _eval(["--output-dir", str(run), "--completions", str(run / name)], capsys)
    assert code == 2 and "--completions" in err and "run directory" in err
    assert (run / name).read_text() == "the run's own\n"


def test_the_config_being_evaluated_is_refused(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  name_or_path: nowhere\n")
    code, err = _eval([str(config), "--completions", str(config)], capsys)
    assert code == 2 and "--completions" in err and config.read_text().startswith("model:")


def test_a_new_file_beside_the_run_is_not_refused_by_these_checks(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".steadyrl-run").write_text('{"steadyrl_run": 1}\n')
    code, err = _eval(["--output-dir", str(run), "--completions", str(run / "completions.jsonl")], capsys)
    assert code == 2 and "--completions" not in err and "config.yaml" in err  # the next check: no config


@pytest.mark.parametrize("key", ["data.eval_path", "data.train_path"])
def test_the_prompt_files_are_refused(tmp_path, capsys, key):
    """Both are JSONL: --completions data/eval.jsonl replaced the held-out prompts with completions."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "2+2", "answer": "4"}\n')
    config = tmp_path / "c.yaml"
    config.write_text(f"model:\n  name_or_path: {tmp_path / 'no-model'}\ndata:\n"
                      f"  train_path: {tmp_path / 'train.jsonl'}\n  eval_path: {tmp_path / 'eval.jsonl'}\n")
    (tmp_path / "train.jsonl").write_text(prompts.read_text())
    (tmp_path / "eval.jsonl").write_text(prompts.read_text())
    target = tmp_path / ("eval.jsonl" if key == "data.eval_path" else "train.jsonl")
    code, err = _eval([str(config), "--completions", str(target)], capsys)
    assert code == 2 and "--completions" in err and key in err
    assert target.read_text() == prompts.read_text()
