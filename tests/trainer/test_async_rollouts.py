"""Asynchronous rollouts (``rollout.asynchronous.max_staleness``): a worker process generates ahead.

* ``max_staleness: 0`` is the synchronous run, step for step (metrics and final weights);
* with ``max_staleness: N`` every batch is at most N policy versions old, exactly N once the
  pipeline is full, and the behaviour log-probs come back (the TIS metrics are logged);
* a resumed run replays the uninterrupted one exactly (batches in flight are in the checkpoint);
* the worker ends with the run, and a crashed worker is a clear error, not a hang;
* combinations it does not support are refused at load.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from steadyrl.config import load_config
from steadyrl.errors import ConfigError, RolloutWorkerError
from steadyrl.tracking import read_jsonl
from steadyrl.recipe import train

REWARDS = '''
def varied(prompts, completions, **columns):
    return [float(len(c) % 3) for c in completions]
'''


@pytest.fixture
def write_config(tiny_model_dir, tmp_path):
    from steadyrl.demo.task import make_splits

    rows, _ = make_splits(48, 0, min_len=3, max_len=4, seed=0)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text(REWARDS)

    def write(name: str, staleness=None, steps: int = 4) -> str:
        config = {
            "model": {"name_or_path": str(tiny_model_dir)},
            "data": {"train_path": str(tmp_path / "train.jsonl"), "shuffle": False},
            "rewards": [{"name": f"{tmp_path / 'rewards.py'}:varied"}],
            "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 5,
                        "asynchronous": {"max_staleness": staleness}},
            "algorithm": {"kl_mode": "none"},
            "optim": {"lr": 1e-2},
            "trainer": {"max_steps": steps, "save_every": 2, "device": "cpu", "num_threads": 1,
                        "samples_every": 0},
            "eval": {"num_samples": 0},
        }
        path = tmp_path / name
        path.write_text(yaml.safe_dump(config))
        return str(path)

    return write


def _rows(run_dir, drop=("time/", "throughput/")):
    return [{k: v for k, v in m.items() if not k.startswith(drop)} for m in read_jsonl(run_dir / "metrics.jsonl")]


def _weights(run_dir):
    from safetensors.torch import load_file

    from steadyrl.run.checkpoint import latest_checkpoint

    return load_file(latest_checkpoint(run_dir / "checkpoints") / "policy" / "model.safetensors")


@pytest.mark.slow
def test_max_staleness_0_equals_the_synchronous_run(write_config, tmp_path):
    train(write_config("sync.yaml"), [], output_dir=str(tmp_path / "sync"))
    train(write_config("async0.yaml", 0), [], output_dir=str(tmp_path / "async0"))
    drop = ("time/", "throughput/", "rollout/")
    assert _rows(tmp_path / "async0", drop) == _rows(tmp_path / "sync", drop)
    on, off = _weights(tmp_path / "async0"), _weights(tmp_path / "sync")
    assert all(torch.equal(on[k], off[k]) for k in off)
    ages = [m["rollout/staleness_max"] for m in read_jsonl(tmp_path / "async0" / "metrics.jsonl")
            if "rollout/staleness_max" in m]
    assert ages == [0.0] * 4


@pytest.mark.slow
def test_batches_are_never_more_than_max_staleness_versions_old(write_config, tmp_path):
    train(write_config("async2.yaml", 2, steps=5), [], output_dir=str(tmp_path / "run"))
    steps = [m for m in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "rollout/staleness_max" in m]
    versions = [m["rollout/policy_version"] for m in steps]
    assert versions == [0.0, 0.0, 0.0, 1.0, 2.0]  # step t is generated from version max(0, t - 1 - 2)
    assert [m["rollout/staleness_max"] for m in steps] == [0.0, 1.0, 2.0, 2.0, 2.0]
    # the behaviour log-probs come back: equal to the trainer's while the batch is fresh, not once stale
    assert abs(steps[0]["rollout/logprob_diff_mean"]) < 1e-6 and steps[0]["rollout/tis_weight_mean"] == pytest.approx(1.0)
    assert all("rollout/tis_weight_mean" in m for m in steps)
    assert any(abs(m["rollout/logprob_diff_mean"]) > 1e-4 for m in steps[2:])


@pytest.mark.slow
def test_a_resumed_run_replays_the_uninterrupted_one(write_config, tmp_path):
    config = write_config("async1.yaml", 1, steps=4)
    train(config, [], output_dir=str(tmp_path / "full"))
    import support

    cut = support.crashed_copy(tmp_path / "full", tmp_path / "cut", last_step=4, steps_kept=2)
    with pytest.raises(ConfigError, match="checkpoint was written with 1"):  # its batch 3 is 1 version old
        train(config, ["rollout.asynchronous.max_staleness=2"], output_dir=str(cut), resume=True)
    train(config, [], output_dir=str(cut), resume=True)
    assert _rows(cut) == _rows(tmp_path / "full")
    a, b = _weights(cut), _weights(tmp_path / "full")
    assert all(torch.equal(a[k], b[k]) for k in b)


@pytest.mark.parametrize("override, what", [
    ("algorithm.dynamic_sampling=true", "dynamic_sampling"),
    ("rollout.multi_turn.environment=env.py:Env", "multi-turn"),
    ("model.lora.enabled=true", "lora"),
])
def test_unsupported_combinations_are_refused_at_load(override, what):
    with pytest.raises(ConfigError, match=what):
        load_config(None, ["rollout.asynchronous.max_staleness=1", override])


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid`` and that run multiprocessing's spawn."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(stat[1]) == pid and stat[0] != "Z" and b"spawn_main" in cmdline:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_the_worker_ends_with_the_run(write_config, tmp_path, monkeypatch):
    import os

    from steadyrl.run import asynchronous

    seen = []
    start = asynchronous.AsyncRollouts._start

    def recording(self, run, rng):
        start(self, run, rng)
        seen.append(self.process.pid)

    monkeypatch.setattr(asynchronous.AsyncRollouts, "_start", recording)
    train(write_config("a.yaml", 1, steps=2), [], output_dir=str(tmp_path / "run"))
    assert len(seen) == 1 and not _alive(seen[0])
    assert _children(os.getpid()) == []


@pytest.mark.slow
def test_the_worker_dies_when_the_trainer_is_killed(write_config, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    config = write_config("long.yaml", 1, steps=200)
    proc = subprocess.Popen([sys.executable, "-m", "steadyrl", "train", config, "--output-dir", str(tmp_path / "run")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 120
        while not (workers := _children(proc.pid)):
            assert proc.poll() is None and time.monotonic() < deadline, "the worker never started"
            time.sleep(0.2)
        while not (tmp_path / "run" / "metrics.jsonl").is_file() or not _alive(workers[0]):
            assert time.monotonic() < deadline, "the run never logged a step"
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while _alive(workers[0]):
        assert time.monotonic() < deadline, f"rollout worker {workers[0]} outlived the killed trainer"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_killed_worker_is_a_clear_error_not_a_hang(write_config, tmp_path, monkeypatch):
    import os
    import signal

    from steadyrl.run import asynchronous

    push = asynchronous.AsyncRollouts.push

    def push_then_kill(self, version):
        push(self, version)
        if version == 1:
            os.kill(self.process.pid, signal.SIGKILL)

    monkeypatch.setattr(asynchronous.AsyncRollouts, "push", push_then_kill)
    with pytest.raises(RolloutWorkerError, match="exit status -9"):
        train(write_config("a.yaml", 1, steps=4), [], output_dir=str(tmp_path / "run"))


@pytest.mark.slow
def test_an_exception_in_the_worker_comes_back_with_its_traceback(write_config, tmp_path, monkeypatch):
    from steadyrl.run import asynchronous

    send = asynchronous.AsyncRollouts._send

    def bad_tokens(self, message):
        if message["kind"] == "generate" and message["step"] == 2:
            message = {**message, "prompt_ids": [[10**9] * 3 for _ in message["prompt_ids"]]}
        send(self, message)

    monkeypatch.setattr(asynchronous.AsyncRollouts, "_send", bad_tokens)
    with pytest.raises(RolloutWorkerError, match="(?s)rollout worker.*failed.*Traceback.*IndexError"):
        train(write_config("a.yaml", 1, steps=4), [], output_dir=str(tmp_path / "run"))


def test_a_trainer_on_a_gpu_is_refused_before_any_worker_starts():
    from steadyrl.config.compat import check_parallel

    config = load_config(None, ["rollout.asynchronous.max_staleness=1"])
    with pytest.raises(ConfigError, match="trainer.device on cuda"):
        check_parallel(config, torch.device("cuda"), 1)


def test_asynchronous_rollouts_under_torchrun_are_refused_before_any_model_loads():
    from steadyrl.config.compat import check_parallel

    config = load_config(None, ["rollout.asynchronous.max_staleness=1"])
    with pytest.raises(ConfigError, match="under torchrun"):
        check_parallel(config, torch.device("cpu"), 2)
