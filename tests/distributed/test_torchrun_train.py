"""``torchrun --nproc_per_node 2 -m steadyrl train`` on the CPU (gloo) with the tiny model:
one metrics.jsonl and one set of checkpoints written by rank 0 alone, every rank's RNG state in
the checkpoint, a crash resumed with 2 processes reproduces the uninterrupted run exactly, the
2-process checkpoint resumes in 1 process. The same loop with FSDP2 (on gloo: see
worker_train_fsdp.py) writes full weights and optimizer state that resume in 1 process."""

from __future__ import annotations

import json
import shutil

import pytest
import support
import torch
import yaml
from dp_common import HERE, launch, torchrun

from steadyrl.tracking import read_metrics
from steadyrl.recipe import train

TIMING = ("time/", "throughput/")


def _comparable(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.startswith(TIMING)} for m in metrics]


@pytest.fixture(scope="module")
def config_path(tiny_model_dir, tmp_path_factory):
    from steadyrl.demo.task import make_splits

    root = tmp_path_factory.mktemp("dp_train")
    train_rows, held_out = make_splits(64, 8, min_len=3, max_len=4, seed=0)
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train_rows))
    (root / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held_out))
    (root / "rewards.py").write_text(
        "def partial(prompts, completions, answer, **columns):\n"
        "    return [sum(x == y for x, y in zip(c.strip(), a)) / max(len(a), len(c.strip()), 1)\n"
        "            for c, a in zip(completions, answer)]\n")
    config = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"train_path": str(root / "train.jsonl"), "eval_path": str(root / "eval.jsonl")},
        "rewards": [{"name": f"{root / 'rewards.py'}:partial"}],
        "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 6},
        "algorithm": {"kl_coef": 0.05, "reward_norm_mean": "batch", "whiten_advantages": True},
        "optim": {"lr": 1e-3},
        "trainer": {"max_steps": 3, "save_every": 2, "keep_checkpoints": 3, "samples_every": 1,
                    "micro_batch_size": 3, "mini_batch_size": 8, "device": "cpu", "num_threads": 1},
        "eval": {"num_samples": 0},
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def two_process_run(config_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("dp_run") / "run"
    proc = torchrun(["-m", "steadyrl", "train", str(config_path), "--output-dir", str(out)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


@pytest.mark.slow
def test_rank_zero_alone_writes_the_run(two_process_run):
    out, proc = two_process_run
    assert [m["step"] for m in read_metrics(out)] == [0, 1, 2, 3]  # eval at 0, then one line a step
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000002", "step_000003"]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [1] * 8 + [2] * 8 + [3] * 8  # one table a step, not one per rank
    assert json.loads((out / "summary.json").read_text())["steps"] == 3
    assert proc.stdout.count("done: 3 steps") == 1 and proc.stdout.count("eval before RL") == 1
    step = read_metrics(out)[1]
    assert step["reward/valid_frac"] == 1.0 and 0 < step["actor/grad_norm"]
    assert step["critic/advantages_std"] == pytest.approx(1.0, abs=1e-3)  # whitened over the global batch
    # mini_batch_size 8 of 16 samples: two optimizer steps, so the rollout log-probs were kept
    # and the second mini-batch sees a ratio that moved (it would be exactly 1 without them)
    assert step["actor/approx_kl"] > 0


@pytest.mark.slow
def test_the_checkpoint_holds_every_ranks_rng(two_process_run):
    out, _ = two_process_run
    state = torch.load(out / "checkpoints" / "step_000003" / "state.pt", weights_only=False)
    ranks = state["rng_ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["torch"], ranks[1]["torch"])  # ranks sample apart
    assert torch.equal(state["rng"]["torch"], ranks[0]["torch"])
    assert state["sampler"]["drawn"] == 3 * 4  # the global batch: 4 prompts a step, not 2 per rank


@pytest.mark.slow
def test_a_crash_resumed_on_two_processes_equals_the_uninterrupted_run(two_process_run, config_path, tmp_path):
    out, _ = two_process_run
    crashed = support.crashed_copy(out, tmp_path / "crashed", last_step=3, steps_kept=2)
    proc = launch(["-m", "steadyrl", "train", str(config_path), "--output-dir", str(crashed), "--resume"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _comparable(read_metrics(crashed)) == _comparable(read_metrics(out))


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_in_one_process(two_process_run, config_path, tmp_path):
    out, _ = two_process_run
    again = tmp_path / "again"
    shutil.copytree(out, again)
    summary = train(str(config_path), ["trainer.max_steps=4"], output_dir=str(again), resume=True)
    assert summary["steps"] == 4
    metrics = read_metrics(again)
    assert [m["step"] for m in metrics] == [0, 1, 2, 3, 4] and metrics[-1]["actor/grad_norm"] > 0



@pytest.mark.slow
def test_an_fsdp_run_checkpoints_full_weights_that_resume_in_one_process(config_path, tmp_path, tiny_model_dir):
    out = tmp_path / "fsdp"
    proc = launch([str(HERE / "worker_train_fsdp.py"), str(config_path), "--output-dir", str(out),
                     "trainer.parallel=fsdp", "trainer.max_steps=2", "trainer.samples_every=0"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [m["step"] for m in read_metrics(out)] == [0, 1, 2] and read_metrics(out)[2]["actor/approx_kl"] > 0
    from steadyrl.models import load_policy

    saved = load_policy(str(out / "checkpoints" / "step_000002" / "policy"), dtype=torch.float32,
                        device=torch.device("cpu")).state_dict()
    start = load_policy(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu")).state_dict()
    assert {k: v.shape for k, v in saved.items()} == {k: v.shape for k, v in start.items()}  # full, not shards
    assert any(not torch.equal(saved[k], start[k]) for k in saved)
    state = torch.load(out / "checkpoints" / "step_000002" / "state.pt", weights_only=False)
    assert sorted(state["optimizer"]["state"]) == list(range(len(state["optimizer"]["state"])))  # by position
    summary = train(str(config_path), ["trainer.max_steps=3"], output_dir=str(out), resume=True)
    assert summary["steps"] == 3 and read_metrics(out)[-1]["actor/grad_norm"] > 0
