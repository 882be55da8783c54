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
from steadyrl.trainer import train

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

    from steadyrl.trainer.checkpoint import latest_checkpoint

    return load_file(latest_checkpoint(run_dir / "checkpoints") / "policy" / "model.safetensors")


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


def test_batches_are_never_more_than_max_staleness_versions_old(write_config, tmp_path):
    train(write_config("async2.yaml", 2, steps=5), [], output_dir=str(tmp_path / "run"))
    steps = [m for m in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "rollout/staleness_max" in m]
    versions = [m["rollout/policy_version"] for m in steps]
    assert versions == [0.0, 0.0, 0.0, 1.0, 2.0]  # step t is generated from version max(0, t - 1 - 2)
    assert [m["rollout/staleness_max"] for m in steps] == [0.0, 1.0, 2.0, 2.0, 2.0]
    assert all("rollout/tis_weight_mean" in m or any(k.startswith("rollout/") and "mismatch" in k for k in m)
               for m in steps[1:])


def test_a_resumed_run_replays_the_uninterrupted_one(write_config, tmp_path):
    config = write_config("async1.yaml", 1, steps=4)
    train(config, [], output_dir=str(tmp_path / "full"))
    import support

    cut = support.crashed_copy(tmp_path / "full", tmp_path / "cut", last_step=4, steps_kept=2)
    train(config, [], output_dir=str(cut), resume=True)
    assert _rows(cut) == _rows(tmp_path / "full")
    a, b = _weights(cut), _weights(tmp_path / "full")
    assert all(torch.equal(a[k], b[k]) for k in b)


@pytest.mark.parametrize("override, what", [
    ("algorithm.dynamic_sampling=true", "dynamic_sampling"),
    ("rollout.environment=env.py:Env", "multi-turn"),
    ("model.lora.enabled=true", "lora"),
])
def test_unsupported_combinations_are_refused_at_load(override, what):
    with pytest.raises(ConfigError, match=what):
        load_config(None, ["rollout.asynchronous.max_staleness=1", override])
