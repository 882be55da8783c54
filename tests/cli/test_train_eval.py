"""The happy path, end to end: ``steadyrl train`` on a tiny model, a 16-prompt JSONL file and a
user reward file, then ``steadyrl eval`` of the run, then a second ``train`` into the same
folder, which must refuse to mix two runs."""

from __future__ import annotations

import json

import pytest
import yaml

from steadyrl import cli
from steadyrl.config import load_config


@pytest.fixture(scope="module")
def finished_run(tiny_run, tmp_path_factory, steadyrl_cli):
    """A 2-step run of the real command; the overrides come after ``--output-dir`` on purpose."""
    out = tmp_path_factory.mktemp("finished") / "run"
    proc = steadyrl_cli("train", str(tiny_run.config), "--output-dir", str(out), "trainer.max_steps=2",
                        cwd=tiny_run.root)
    return out, proc


def test_train_exits_0_and_writes_the_run_directory(finished_run):
    out, proc = finished_run
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "checkpoints"):
        assert (out / name).exists(), name
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert checkpoints and checkpoints[-1].endswith("2"), checkpoints


def test_saved_config_is_the_resolved_config(finished_run, tiny_run):
    out, _ = finished_run
    saved = load_config(out / "config.yaml")
    assert saved == load_config(tiny_run.config, ["trainer.max_steps=2"])
    assert yaml.safe_load((out / "config.yaml").read_text())["trainer"]["max_steps"] == 2


def test_metrics_hold_the_step_0_eval_and_one_row_per_step(finished_run):
    out, _ = finished_run
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [row["step"] for row in rows]
    assert steps == [0, 1, 2]
    assert "eval/accuracy" in rows[0] and "eval/reward_mean" in rows[0]
    for row in rows[1:]:
        assert "reward/mean" in row and "actor/grad_norm" in row and "time/step_s" in row
    assert "eval/accuracy" in rows[-1]  # the evaluation after training, logged at the last step


def test_summary_reports_steps_time_and_evals(finished_run):
    out, _ = finished_run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2
    assert summary["wall_time_s"] > 0
    for key in ("eval_before", "eval_after"):
        assert 0.0 <= summary[key]["accuracy"] <= 1.0
        assert "reward_mean" in summary[key]


def test_eval_of_the_run_prints_accuracy_json(finished_run, steadyrl_cli, tiny_run):
    out, _ = finished_run
    proc = steadyrl_cli("eval", "--output-dir", str(out), "--trust-run-code", cwd=tiny_run.root)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert 0.0 <= result["accuracy"] <= 1.0
    assert result["num_prompts"] == 8
    assert "checkpoints" in result["model"]


def test_train_into_a_finished_run_without_resume_exits_2(finished_run, tiny_run, capsys):
    out, _ = finished_run
    before = (out / "metrics.jsonl").read_text()
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steadyrl: error: ")
    assert "--resume" in lines[0] and "--overwrite" in lines[0] and str(out) in lines[0]
    assert (out / "metrics.jsonl").read_text() == before  # the finished run is untouched


def _eval_config(tmp_path, tiny_run, **data) -> str:
    config = {"data": {k: str(v) for k, v in data.items()}, "rewards": [{"name": tiny_run.reward, "isolation": "inline"}],
              "rollout": {"max_new_tokens": 6}, "eval": {"num_samples": 0}}
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_eval_of_a_model_given_on_the_command_line(tiny_run, tmp_path, capsys):
    cfg = _eval_config(tmp_path, tiny_run, train_path=tiny_run.train, eval_path=tiny_run.eval)
    code = cli.main(["eval", cfg, "--model", str(tiny_run.model)])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out[out.index("{"):])["num_prompts"] == 8


def test_eval_uses_the_eval_file_when_the_config_has_no_train_file(tiny_run, tmp_path, capsys):
    cfg = _eval_config(tmp_path, tiny_run, eval_path=tiny_run.eval)
    code = cli.main(["eval", cfg, f"model.name_or_path={tiny_run.model}"])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out[out.index("{"):])["num_prompts"] == 8


def test_eval_of_a_dataset_dict_reads_its_test_split_and_says_so(tiny_run, tmp_path, capsys):
    import datasets

    rows = [json.loads(line) for line in tiny_run.eval.read_text().splitlines() if line.strip()]
    folder = tmp_path / "held_out"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:3]),
                          "test": datasets.Dataset.from_list(rows[3:])}).save_to_disk(str(folder))
    cfg = _eval_config(tmp_path, tiny_run, eval_path=folder)
    assert cli.main(["eval", cfg, "--model", str(tiny_run.model)]) == 0
    out = capsys.readouterr().out
    assert f"held-out prompts from split 'test' of data.eval_path = {str(folder)!r}" in out
    assert json.loads(out[out.index("{"):])["num_prompts"] == len(rows) - 3
    assert cli.main(["eval", cfg, "--model", str(tiny_run.model), "data.eval_split=train"]) == 0
    out = capsys.readouterr().out
    assert "split 'train'" in out and json.loads(out[out.index("{"):])["num_prompts"] == 3


def test_evaluations_during_training_are_printed(tiny_run, tmp_path, capsys):
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(tmp_path / "run"), "trainer.max_steps=3",
                     "trainer.eval_every=2", "eval.num_samples=0"])
    out = capsys.readouterr().out
    assert code == 0
    printed = [line for line in out.splitlines() if line.startswith("eval ")]
    assert [line.split(":")[0] for line in printed] == ["eval before RL", "eval at step 2", "eval after RL"]
    assert json.loads(printed[1].split(": ", 1)[1])["num_prompts"] == 8


def test_eval_of_a_demo_run_scores_the_demo_held_out_strings(tmp_path, capsys):
    """Where the demo's data is meant (its own run), ``steadyrl eval --output-dir`` still uses it;
    only a model given without held-out data is refused (tests/cli/test_bad_input.py)."""
    out = tmp_path / "demo"
    tiny = ["trainer.max_steps=1", "demo.num_train=16", "demo.num_eval=4", "demo.warmstart_steps=0",
            "demo.n_layers=1", "demo.hidden_size=16", "demo.n_heads=2", "rollout.prompts_per_step=4",
            "rollout.group_size=2", "eval.num_samples=0"]
    assert cli.main(["train", "--output-dir", str(out), *tiny]) == 0
    capsys.readouterr()
    assert cli.main(["eval", "--output-dir", str(out)]) == 0
    out_text = capsys.readouterr().out
    assert json.loads(out_text[out_text.index("{"):])["num_prompts"] == 4


MARKING_REWARD = """from pathlib import Path
Path({marker!r}).touch()  # runs when the file is loaded


def score(prompts, completions, **kwargs):
    return [0.0] * len(completions)
"""


def _run_dir_naming(finished_run, tmp_path, rewards, **model):
    """A copy of the finished run whose config.yaml names ``rewards`` (and ``model`` keys)."""
    import shutil

    out, _ = finished_run
    run = tmp_path / "their_run"
    shutil.copytree(out, run)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    saved["rewards"] = rewards
    saved["model"].update(model)
    from steadyrl.run.directory import with_hash_line

    # written as steadyrl writes it (a hand edit would be refused as damaged before the trust check)
    (run / "config.yaml").write_text(with_hash_line(yaml.safe_dump(saved, sort_keys=False)))
    return run


def test_eval_of_a_run_directory_runs_its_reward_code_only_with_trust_run_code(finished_run, tmp_path, capsys):
    marker = tmp_path / "their-code-ran"
    (tmp_path / "their_rewards.py").write_text(MARKING_REWARD.format(marker=str(marker)))
    run = _run_dir_naming(finished_run, tmp_path, [{"name": f"{tmp_path / 'their_rewards.py'}:score"}])
    assert cli.main(["eval", "--output-dir", str(run), "eval.num_samples=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "their_rewards.py:score" in err and "--trust-run-code" in err
    assert not marker.exists()  # refused before anything was loaded

    assert cli.main(["eval", "--output-dir", str(run), "--trust-run-code", "eval.num_samples=0"]) == 0
    assert marker.exists()


def test_eval_of_a_run_directory_with_trust_remote_code_needs_the_flag(finished_run, tmp_path, capsys):
    run = _run_dir_naming(finished_run, tmp_path, [{"name": "exact_match"}], trust_remote_code=True)
    assert cli.main(["eval", "--output-dir", str(run), "eval.num_samples=0"]) == 2
    err = capsys.readouterr().err
    assert "model.trust_remote_code = true" in err and "--trust-run-code" in err


def test_eval_of_a_run_directory_with_builtin_rewards_or_ones_own_config_needs_no_flag(
        finished_run, tiny_run, tmp_path, capsys):
    run = _run_dir_naming(finished_run, tmp_path, [{"name": "exact_match"}])
    assert cli.main(["eval", "--output-dir", str(run), "eval.num_samples=0"]) == 0
    # a config of one's own (the user reward file is the user's): no flag either
    out, _ = finished_run
    assert cli.main(["eval", str(tiny_run.config), "--output-dir", str(out), "eval.num_samples=0"]) == 0


def _refused(run, capsys) -> str:
    """eval of ``run`` without the flag: exit 2 and one line naming the flag; that line."""
    assert cli.main(["eval", "--output-dir", str(run), "eval.num_samples=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "--trust-run-code" in err
    return err


def test_eval_of_a_run_directory_whose_reward_model_trusts_remote_code_needs_the_flag(finished_run, tmp_path,
                                                                                       capsys):
    rewards = [{"name": "reward_model", "options": {"model": str(tmp_path / "rm"), "trust_remote_code": True}}]
    err = _refused(_run_dir_naming(finished_run, tmp_path, rewards), capsys)
    assert "rewards[0] (reward_model).options.trust_remote_code = True" in err


def test_eval_of_a_run_directory_whose_code_reward_names_an_interpreter_runs_nothing(finished_run, tmp_path, capsys):
    marker = tmp_path / "their-interpreter-ran"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\ntouch {marker}\nexec python3 \"$@\"\n")
    python.chmod(0o755)
    rewards = [{"name": "code", "options": {"python": str(python)}}]
    err = _refused(_run_dir_naming(finished_run, tmp_path, rewards), capsys)
    assert "options.python" in err and "runs that interpreter" in err
    assert not marker.exists()  # not even probed: the code reward runs its interpreter when it is built


@pytest.mark.parametrize("options, named", [
    ({"url": "http://127.0.0.1:9/score", "api_key_env": "HF_TOKEN", "check_url": False}, "api_key_env = 'HF_TOKEN'"),
    ({"url": "http://127.0.0.1:9/score", "check_url": False, "headers": {"X-Key": {"env": "AWS_SECRET_ACCESS_KEY"}}},
     "{env: AWS_SECRET_ACCESS_KEY}"),
    ({"url": "http://127.0.0.1:9/score", "check_url": False}, "options.url = 'http://127.0.0.1:9/score'"),
])
def test_eval_of_a_run_directory_may_not_name_the_evaluators_secrets_or_servers_without_the_flag(
        finished_run, tmp_path, capsys, monkeypatch, options, named):
    monkeypatch.setenv("HF_TOKEN", "hf_evaluators_own")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws_evaluators_own")
    err = _refused(_run_dir_naming(finished_run, tmp_path, [{"name": "http", "options": options}]), capsys)
    assert named in err and "evaluators_own" not in err


def test_a_judge_server_set_on_the_command_line_is_the_evaluators_own_choice(finished_run, tmp_path, capsys):
    rewards = [{"name": "http", "options": {"url": "http://127.0.0.1:9/score", "check_url": False}}]
    run = _run_dir_naming(finished_run, tmp_path, rewards)
    err = _refused(run, capsys)
    from steadyrl.config import load_config as load
    from steadyrl.run.trust import run_code

    mine = load(run / "config.yaml", ["rewards=[{name: http, options: {url: 'http://127.0.0.1:8/mine', check_url: false}}]"])
    assert run_code(mine, yaml.safe_load((run / "config.yaml").read_text())) == []
    assert "127.0.0.1:9" in err


def test_each_warning_is_printed_at_most_once(finished_run):
    """transformers' deprecation notices fire on every forward; a run prints each one once at most
    (issue 24: the same FutureWarning was printed several times per step)."""
    _, proc = finished_run
    assert proc.stderr.count("past_key_values") <= 1, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "Warning: " in line]
    assert len(warned) == len(set(warned)), warned
