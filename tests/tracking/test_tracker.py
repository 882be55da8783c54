"""Tracker: metrics.jsonl always complete, crash-tolerant and step-unique; backends lazy and optional."""

from __future__ import annotations

import json
import math
import sys
import types
import warnings

import pytest
import torch

from steadyrl.errors import ConfigError
from steadyrl.tracking import Tracker, read_metrics, read_samples, samples_markdown


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_metrics_jsonl_is_written_and_flushed_line_by_line(tmp_path):
    with Tracker(tmp_path, [], config={"lr": 1e-6}) as tracker:
        tracker.log({"reward/mean": 0.5, "kl/k3": torch.tensor(0.25)}, step=1)
        # readable while the tracker is still open: a crash now would lose nothing
        assert lines(tmp_path / "metrics.jsonl") == [{"step": 1, "reward/mean": 0.5, "kl/k3": 0.25}]
        tracker.log({"reward/mean": 0.6}, step=2)
        assert len(lines(tmp_path / "metrics.jsonl")) == 2


def test_non_finite_values_are_written_as_null_and_read_as_missing(tmp_path):
    with Tracker(tmp_path, []) as tracker:
        tracker.log({"actor/pg_loss": float("nan"), "actor/grad_norm": float("inf"), "reward/mean": 1.0}, step=1)
    text = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"step": 1, "actor/pg_loss": None, "actor/grad_norm": None, "reward/mean": 1.0}
    assert read_metrics(tmp_path) == [{"step": 1, "reward/mean": 1.0}]


def test_logging_the_same_step_twice_merges_into_one_line(tmp_path):
    with Tracker(tmp_path, []) as tracker:
        tracker.log({"reward/mean": 0.5}, step=10)
        tracker.log({"eval/accuracy": 0.7}, step=10)
        tracker.log({"reward/mean": 0.6}, step=11)
    assert lines(tmp_path / "metrics.jsonl") == [
        {"step": 10, "reward/mean": 0.5, "eval/accuracy": 0.7},
        {"step": 11, "reward/mean": 0.6},
    ]


def test_resume_step_drops_later_metrics_and_samples(tmp_path):
    with Tracker(tmp_path, []) as tracker:
        for step in range(1, 8):
            tracker.log({"reward/mean": step}, step)
            tracker.log_samples([{"prompt": "p", "completion": "c", "reward": 1.0}], step)
    with Tracker(tmp_path, [], resume_step=4) as tracker:
        assert tracker.last_step == 4
        tracker.log({"reward/mean": 50}, 5)
        tracker.log_samples([{"prompt": "p", "completion": "again", "reward": 0.0}], 5)
    steps = [row["step"] for row in lines(tmp_path / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4, 5]
    assert read_metrics(tmp_path)[-1]["reward/mean"] == 50
    samples = read_samples(tmp_path)
    assert [r["step"] for r in samples] == [1, 2, 3, 4, 5] and samples[-1]["completion"] == "again"


def test_a_step_before_the_last_one_rewinds_the_log_with_a_warning(tmp_path):
    with Tracker(tmp_path, []) as tracker:
        for step in range(1, 6):
            tracker.log({"reward/mean": step}, step)
    with Tracker(tmp_path, []) as tracker:  # resumed without resume_step: still no duplicate steps
        with pytest.warns(RuntimeWarning, match="dropped 3 line"):
            tracker.log({"reward/mean": 30}, 3)
    assert [row["step"] for row in lines(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_truncate_after_is_available_mid_run(tmp_path):
    with Tracker(tmp_path, []) as tracker:
        for step in range(1, 6):
            tracker.log({"reward/mean": step}, step)
        tracker.truncate_after(2)
        tracker.log({"reward/mean": 3.5}, 3)
    assert [row["step"] for row in lines(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_a_partial_last_line_from_a_crash_is_tolerated_and_cut_off_on_reopen(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "reward/mean": 0.1}\n{"step": 2, "reward/mean": 0.2}\n{"step": 3, "rew')
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a crash tail is expected: no warning
        assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    with Tracker(tmp_path, []) as tracker:
        assert tracker.last_step == 2
        tracker.log({"reward/mean": 0.3}, 3)
    assert [row["step"] for row in lines(path)] == [1, 2, 3]


def test_read_metrics_merges_duplicate_steps_and_warns_on_damaged_inner_lines(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 2, "a": 1}\ngarbage\n{"step": 1, "a": 0}\n{"step": 2, "b": 2, "a": null}\n'
    )
    with pytest.warns(RuntimeWarning, match="skipped 1 unreadable"):
        rows = read_metrics(tmp_path)
    assert rows == [{"step": 1, "a": 0}, {"step": 2, "a": 1, "b": 2}]
    assert read_metrics(tmp_path / "nothing_here") == []


def test_samples_go_to_samples_jsonl_with_their_step(tmp_path):
    rows = [
        {"prompt": "2+2?", "completion": "4", "reward": 1.0, "reward/accuracy": 1.0, "reward/format": 1.0},
        {"prompt": "3+3?", "completion": "7", "reward": float("nan"), "reward/accuracy": 0.0},
    ]
    with Tracker(tmp_path, []) as tracker:
        tracker.log_samples(rows, step=5)
    back = read_samples(tmp_path)
    assert back[0] == {"step": 5, **rows[0]}
    assert back[1]["reward"] is None and back[1]["step"] == 5


def test_non_main_process_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    with Tracker(run_dir, ["tensorboard"], is_main_process=False) as tracker:
        tracker.log({"reward/mean": 1.0}, 1)
        tracker.log_samples([{"prompt": "p"}], 1)
        tracker.truncate_after(0)
    assert not run_dir.exists()


def test_unknown_backend_is_a_config_error_listing_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match="unknown backend 'wandbb'.*tensorboard, wandb, mlflow, trackio"):
        Tracker(tmp_path, ["wandbb"])


@pytest.mark.parametrize("backend", ["wandb", "mlflow", "trackio", "tensorboard"])
def test_missing_backend_package_is_a_config_error_naming_it_and_the_extra(tmp_path, monkeypatch, backend):
    monkeypatch.setitem(sys.modules, backend, None)  # makes ``import backend`` raise ImportError
    with pytest.raises(ConfigError) as err:
        Tracker(tmp_path, [backend])
    assert repr(backend) in str(err.value) and "pip install 'steadyrl[tracking]'" in str(err.value)


def test_tensorboard_backend_writes_events_and_a_sample_table(tmp_path):
    with Tracker(tmp_path, ["tensorboard"], config={"algo": "grpo"}) as tracker:
        tracker.log({"reward/mean": 0.5, "kl/k3": float("nan")}, 1)
        tracker.log_samples([{"prompt": "a|b", "completion": "line1\nline2", "reward": 1.0}], 1)
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_samples_markdown_escapes_pipes_and_newlines():
    md = samples_markdown([{"completion": "x | y\nz", "prompt": "p", "reward": 0.123456, "reward/acc": 1}])
    header, rule, row = md.splitlines()
    assert header == "| prompt | completion | reward | reward/acc |"
    assert row == "| p | x \\| y<br>z | 0.1235 | 1 |"


def _fake_wandb(calls):
    run = types.SimpleNamespace(id="abc123", log=lambda m, step: calls.append(("log", dict(m), step)),
                                finish=lambda: calls.append(("finish",)))  # fmt: skip

    def init(**kw):
        calls.append(("init", kw))
        return run

    return types.SimpleNamespace(init=init, Table=lambda columns, data: ("table", columns, data))


def test_wandb_backend_logs_and_resumes_the_same_run(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls))
    with Tracker(tmp_path, ["wandb"], config={"a": {"b": 1}}, run_name="r1", project="p") as tracker:
        tracker.log({"reward/mean": 0.5}, 3)
        tracker.log_samples([{"prompt": "p", "completion": "c", "reward": 1.0}], 3)
    assert calls[0] == ("init", {"project": "p", "name": "r1", "config": {"a": {"b": 1}}, "dir": str(tmp_path),
                                 "id": None, "resume": None})  # fmt: skip
    assert calls[1] == ("log", {"reward/mean": 0.5}, 3)
    assert calls[2][1]["samples"] == ("table", ["prompt", "completion", "reward"], [["p", "c", 1.0]])
    assert calls[-1] == ("finish",)
    calls.clear()
    with Tracker(tmp_path, ["wandb"], run_name="r1", project="p", resume_step=3):
        pass
    assert calls[0][1]["id"] == "abc123" and calls[0][1]["resume"] == "allow"


def test_mlflow_backend_sanitises_names_and_batches_params(tmp_path, monkeypatch):
    calls = []
    fake = types.SimpleNamespace(
        set_experiment=lambda name: calls.append(("experiment", name)),
        start_run=lambda run_id=None, run_name=None: types.SimpleNamespace(info=types.SimpleNamespace(run_id="m1")),
        log_params=lambda p: calls.append(("params", dict(p))),
        log_metrics=lambda m, step: calls.append(("metrics", dict(m), step)),
        log_table=lambda data, artifact_file: calls.append(("table", data, artifact_file)),
        end_run=lambda: calls.append(("end",)),
    )
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    config = {f"k{i}": i for i in range(150)}
    with Tracker(tmp_path, ["mlflow"], config=config, project="exp") as tracker:
        tracker.log({"eval/pass@k": 0.5, "reward/mean": 1}, 2)
        tracker.log_samples([{"prompt": "p", "reward": 1.0}], 2)
    params = [c for c in calls if c[0] == "params"]
    assert [len(c[1]) for c in params] == [100, 50]
    assert ("metrics", {"eval/pass_k": 0.5, "reward/mean": 1.0}, 2) in calls
    assert ("table", {"prompt": ["p"], "reward": [1.0]}, "samples/step_0000002.json") in calls
    assert calls[0] == ("experiment", "exp") and calls[-1] == ("end",)


def test_trackio_backend_logs_metrics(tmp_path, monkeypatch):
    calls = []
    fake = types.SimpleNamespace(
        init=lambda **kw: calls.append(("init", kw)),
        log=lambda m, step=None: calls.append(("log", dict(m), step)),
        finish=lambda: calls.append(("finish",)),
        Table=lambda columns, data: ("table", columns, data),
    )
    monkeypatch.setitem(sys.modules, "trackio", fake)
    with Tracker(tmp_path, ["trackio"], run_name="t1") as tracker:
        tracker.log({"reward/mean": 0.5}, 1)
    assert calls[0][1]["project"] == "steadyrl" and calls[0][1]["name"] == "t1"
    assert calls[1] == ("log", {"reward/mean": 0.5}, 1) and calls[-1] == ("finish",)


def test_a_failing_backend_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    calls = []
    fake = _fake_wandb(calls)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with Tracker(tmp_path, ["wandb"]) as tracker:
        tracker.backends["wandb"].run.log = lambda m, step: (_ for _ in ()).throw(ConnectionError("offline"))
        with pytest.warns(RuntimeWarning, match="'wandb' failed"):
            tracker.log({"reward/mean": 1.0}, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tracker.log({"reward/mean": 2.0}, 2)  # no second warning
    assert [r["reward/mean"] for r in read_metrics(tmp_path)] == [1.0, 2.0]


def test_close_is_idempotent_and_logging_after_close_is_ignored(tmp_path):
    tracker = Tracker(tmp_path, [])
    tracker.log({"x": 1.0}, 1)
    tracker.close()
    tracker.close()
    tracker.log({"x": 2.0}, 2)
    assert [r["step"] for r in read_metrics(tmp_path)] == [1]
    assert math.isclose(read_metrics(tmp_path)[0]["x"], 1.0)
