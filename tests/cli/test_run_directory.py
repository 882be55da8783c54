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


# --- one run per directory: the lock, unique default names -----------------------------------------------

@pytest.fixture
def hold_lock():
    """``hold_lock(run_dir) -> pid``: another process takes the run directory's lock (as a
    running ``steadyrl train`` does) and keeps it until the test ends."""
    import subprocess
    import sys

    held = []

    def hold(run_dir) -> int:
        code = ("import sys, time; from pathlib import Path; from steadyrl.run.directory import RunLock; "
                "RunLock().acquire(Path(sys.argv[1])); print('held', flush=True); time.sleep(600)")
        proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True)
        held.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc.pid

    yield hold
    for proc in held:
        proc.kill()
        proc.wait()


def test_a_run_on_a_directory_another_run_holds_stops_naming_the_pid(run_copy, tiny_run, capsys, hold_lock):
    pid = hold_lock(run_copy)
    before = _snapshot(run_copy)
    for flag in ("--resume", "--overwrite"):
        _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(run_copy), flag,
                             "trainer.max_steps=3"], str(run_copy), f"PID {pid}", "in use")
    assert _snapshot(run_copy) == before


def test_a_finished_run_leaves_its_directory_unlocked_and_marked(run_copy, tiny_run):
    import json

    from steadyrl.run.directory import LOCK, MARKER

    assert (run_copy / LOCK).read_bytes() == b""  # no PID left behind
    assert json.loads((run_copy / MARKER).read_text()) == {"steadyrl_run": 1}
    assert cli.main(["train", str(tiny_run.config), "--output-dir", str(run_copy), "--resume",
                     "trainer.max_steps=3"]) == 0  # the lock is free again


def test_runs_started_in_the_same_second_get_a_directory_each(tiny_run, tmp_path, monkeypatch):
    from steadyrl.run import directory as rundir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(rundir.time, "strftime", lambda fmt: "20260101-120000")
    for _ in range(3):
        assert cli.main(["train", str(tiny_run.config), "trainer.max_steps=1"]) == 0
    made = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert made == ["grpo-20260101-120000", "grpo-20260101-120000-2", "grpo-20260101-120000-3"]
    assert all((tmp_path / "runs" / name / "checkpoints").is_dir() for name in made)


# --- --overwrite removes runs only -------------------------------------------------------------------------

def test_overwrite_of_a_directory_that_is_not_a_run_removes_nothing(tiny_run, tmp_path, capsys):
    project = tmp_path / "my_project"
    (project / "checkpoints").mkdir(parents=True)
    (project / "checkpoints" / "model.bin").write_text("weights I trained by hand")
    (project / "tensorboard").mkdir()
    (project / "tensorboard" / "events").write_text("my logs")
    before = _snapshot(project)
    _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(project), "--overwrite"],
                "not a steadyrl run directory", "checkpoints", "tensorboard")
    assert _snapshot(project) == before


def test_overwrite_needs_steadyrls_marker_not_just_a_config_and_metrics(run_copy, tiny_run, capsys):
    from steadyrl.run.directory import MARKER

    (run_copy / MARKER).unlink()  # config.yaml + metrics.jsonl: any tool's folder may hold those
    before = _snapshot(run_copy)
    _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(run_copy), "--overwrite",
                         "trainer.max_steps=1"], "not a steadyrl run directory", MARKER, "checkpoints")
    assert _snapshot(run_copy) == before


def test_a_marker_that_is_a_symbolic_link_does_not_make_a_run(run_copy, tiny_run, tmp_path, capsys):
    from steadyrl.run.directory import MARKER, is_run_dir

    (run_copy / MARKER).rename(tmp_path / "elsewhere")
    (run_copy / MARKER).symlink_to(tmp_path / "elsewhere")
    assert not is_run_dir(run_copy)


def test_overwrite_that_cannot_remove_a_file_stops_and_says_which(run_copy, tiny_run, capsys, monkeypatch):
    real_rmtree = shutil.rmtree

    def rmtree(path, ignore_errors=False, **kwargs):
        if str(path).endswith("checkpoints"):  # a file the user may not delete (root ignores chmod)
            if ignore_errors:
                return
            raise PermissionError(13, "Permission denied", str(path))
        return real_rmtree(path, ignore_errors=ignore_errors, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(run_copy), "--overwrite",
                         "trainer.max_steps=1"], "cannot remove", "checkpoints", "Permission denied")


@pytest.mark.parametrize("flag", ["--resume", "--overwrite"])
def test_a_symlinked_run_folder_is_refused_and_the_other_run_is_untouched(finished_run, tiny_run, tmp_path,
                                                                          capsys, flag):
    other = tmp_path / "other"
    shutil.copytree(finished_run, other)
    mine = tmp_path / "mine"
    shutil.copytree(finished_run, mine)
    shutil.rmtree(mine / "checkpoints")
    (mine / "checkpoints").symlink_to(other / "checkpoints")
    before = _snapshot(other)
    _fails_with(capsys, ["train", str(tiny_run.config), "--output-dir", str(mine), flag, "trainer.max_steps=3"],
                "checkpoints", "symbolic link")
    assert _snapshot(other) == before


# --- config.yaml: atomic, and checked before --resume uses it ------------------------------------------------

def test_resume_refuses_a_config_yaml_cut_short(run_copy, capsys):
    path = run_copy / "config.yaml"
    text = path.read_text()
    cut = text[: text.index("optim:")]  # what a full disk left: still valid YAML, optim.* back at defaults
    yaml.safe_load(cut)
    path.write_text(cut)
    before = _snapshot(run_copy)
    _fails_with(capsys, ["train", "--output-dir", str(run_copy), "--resume", "trainer.max_steps=3"],
                str(path), "steadyrl-sha256", "cut short")
    assert _snapshot(run_copy) == before


def test_eval_of_a_run_refuses_its_config_yaml_cut_short(run_copy, capsys):
    path = run_copy / "config.yaml"
    path.write_text(path.read_text().split("eval:")[0])
    _fails_with(capsys, ["eval", "--output-dir", str(run_copy)], str(path), "cut short")


def test_resume_refuses_a_damaged_config_yaml_naming_both_hashes(run_copy, tiny_run, capsys):
    import hashlib
    import re

    path = run_copy / "config.yaml"
    text = path.read_text()
    recorded = re.search(r"# steadyrl-sha256: ([0-9a-f]{64})", text).group(1)
    assert "  max_new_tokens: 6\n" in text
    damaged = text.replace("  max_new_tokens: 6\n", "  max_new_tokens: 60\n", 1)  # one byte flipped, one added
    path.write_text(damaged)
    actual = hashlib.sha256(damaged[: damaged.index("# steadyrl-sha256")].encode()).hexdigest()
    for argv in (["train", "--output-dir", str(run_copy), "--resume"],  # the run's own config
                 ["train", str(tiny_run.config), "--output-dir", str(run_copy), "--resume"]):  # a new one
        _fails_with(capsys, argv + ["trainer.max_steps=3"], str(path), recorded, actual)


def test_resume_with_changed_settings_then_resume_again_is_allowed(run_copy, tiny_run):
    # resumed with overrides (the documented way out of a halted run), then resumed again with
    # its own, rewritten config.yaml: both are steadyrl's own writes, not damage
    assert cli.main(["train", str(tiny_run.config), "--output-dir", str(run_copy), "--resume",
                     "trainer.max_steps=3", "optim.lr=0.0005"]) == 0
    assert "lr: 0.0005" in (run_copy / "config.yaml").read_text()
    assert cli.main(["train", "--output-dir", str(run_copy), "--resume", "trainer.max_steps=4"]) == 0


def test_resume_accepts_the_config_yaml_of_a_version_before_the_hash(run_copy):
    from steadyrl.run.directory import MARKER
    from steadyrl.run.trust import is_own_config

    path = run_copy / "config.yaml"
    path.write_text(path.read_text().split("# steadyrl-sha256")[0])
    (run_copy / MARKER).unlink()
    # a run of a version before the trust record names its reward file: trusted once, by the flag
    assert cli.main(["train", "--output-dir", str(run_copy), "--resume", "trainer.max_steps=3", "--trust-run-code"]) == 0
    assert "# steadyrl-sha256: " in path.read_text()  # and the run directory is brought up to date
    assert (run_copy / MARKER).is_file() and is_own_config(path)


# --- secrets in a reward's options ----------------------------------------------------------------------------

JUDGE = '''
def judged(prompts, completions, answer, api_key=None, **columns):
    assert api_key == "sk-from-env", "the reward did not get the key"
    return [float(c.strip() == a) for c, a in zip(completions, answer)]
'''


def test_a_secret_option_reaches_the_reward_but_no_file_of_the_run(tiny_run, tmp_path, capsys, monkeypatch):
    secret = "sk-live-do-not-log-me"
    out = tmp_path / "secret_run"
    rewards = f"rewards=[{{name: '{tiny_run.reward}', options: {{api_key: {secret}}}}}]"
    assert cli.main(["train", str(tiny_run.config), "--output-dir", str(out), rewards, "trainer.max_steps=1",
                     "trainer.trackers=[tensorboard]", "trainer.samples_every=1"]) == 0
    capsys.readouterr()
    leaked = [str(p) for p in out.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []
    assert "api_key: <redacted>" in (out / "config.yaml").read_text()
    assert cli.main(["config", "show", str(tiny_run.config), rewards]) == 0
    shown = capsys.readouterr().out
    assert secret not in shown and "<redacted>" in shown
    # resuming from config.yaml would pass "<redacted>" as the key: refused, saying what to do
    _fails_with(capsys, ["train", "--output-dir", str(out), "--resume", "trainer.max_steps=2"],
                "api_key", "<redacted>", "{env: VAR_NAME}")


def test_a_secret_given_as_an_env_variable_is_used_and_the_resume_finds_it_again(tiny_run, tmp_path, monkeypatch):
    (tmp_path / "judge.py").write_text(JUDGE)
    monkeypatch.setenv("STEADYRL_TEST_JUDGE_KEY", "sk-from-env")
    out = tmp_path / "env_run"
    rewards = (f"rewards=[{{name: '{tmp_path / 'judge.py'}:judged', isolation: inline, "
               "options: {api_key: {env: STEADYRL_TEST_JUDGE_KEY}}}]")
    assert cli.main(["train", str(tiny_run.config), "--output-dir", str(out), rewards, "trainer.max_steps=1"]) == 0
    assert "api_key:\n      env: STEADYRL_TEST_JUDGE_KEY" in (out / "config.yaml").read_text()
    assert cli.main(["train", "--output-dir", str(out), "--resume", "trainer.max_steps=2"]) == 0
    from steadyrl.tracking import read_metrics

    assert [m["step"] for m in read_metrics(out) if "reward/judged/failed" in m] == [1, 2]
    assert all(m["reward/judged/failed"] == 0 for m in read_metrics(out) if "reward/judged/failed" in m)


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


# --- a checkpoint that is a symbolic link is not followed ---------------------------------------------------

@pytest.mark.parametrize("what", ["step", "policy"])
def test_resume_and_eval_refuse_a_checkpoint_that_is_a_symbolic_link(run_copy, tiny_run, tmp_path, capsys, what):
    latest = sorted((run_copy / "checkpoints").iterdir())[-1]
    target = latest if what == "step" else latest / "policy"
    shutil.move(target, tmp_path / "someone_elses")
    target.symlink_to(tmp_path / "someone_elses")
    before = _snapshot(run_copy)
    _fails_with(capsys, ["train", "--resume", "--output-dir", str(run_copy), "trainer.max_steps=3"],
                str(target), "symbolic link")
    _fails_with(capsys, ["eval", "--output-dir", str(run_copy), "eval.num_samples=0"], str(target), "symbolic link")
    assert _snapshot(run_copy) == before and (tmp_path / "someone_elses").is_dir()


def test_resume_and_eval_of_a_checkpoint_with_a_cut_weight_file_exit_2_naming_it(run_copy, capsys):
    latest = sorted((run_copy / "checkpoints").iterdir())[-1]
    weights = latest / "policy" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # a copy that stopped half-way
    _fails_with(capsys, ["train", "--resume", "--output-dir", str(run_copy), "trainer.max_steps=3"],
                str(weights), "cut short")
    _fails_with(capsys, ["eval", "--output-dir", str(run_copy), "--trust-run-code", "eval.num_samples=0"],
                str(weights), "cut short")
