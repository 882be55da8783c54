"""GPU runs of the scale-out paths: FSDP2 with 2 GPUs, DDP over NCCL, and the vLLM engine.

NEVER RUN in this project's CI (a CPU machine): they are skipped without CUDA (and vLLM).
Written to be run as is on a machine with 2 GPUs: ``pytest -m gpu tests/distributed``.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import yaml
from dp_common import torchrun

from steadyrl.tracking import read_metrics
from steadyrl.recipe import train

pytestmark = pytest.mark.gpu
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
has_vllm = pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
                              reason="needs a CUDA GPU and vllm")


@pytest.fixture
def gpu_config(tiny_model_dir, tmp_path):
    import json

    from steadyrl.demo.task import make_splits

    rows, held = make_splits(64, 8, min_len=3, max_len=4, seed=0)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    (tmp_path / "rewards.py").write_text(
        "def length(prompts, completions, **columns):\n    return [float(len(c)) for c in completions]\n")

    def write(**trainer):
        config = {"model": {"name_or_path": str(tiny_model_dir), "dtype": "float32"},
                  "data": {"train_path": str(tmp_path / "train.jsonl"), "eval_path": str(tmp_path / "eval.jsonl")},
                  "rewards": [{"name": f"{tmp_path / 'rewards.py'}:length"}],
                  "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 6},
                  "trainer": {"max_steps": 2, "save_every": 1, "samples_every": 0, "device": "cuda", **trainer},
                  "eval": {"num_samples": 0}}
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    return write


@two_gpus
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_gpus_train_and_the_checkpoint_resumes_in_one_process(parallel, gpu_config, tmp_path):
    config = gpu_config(parallel=parallel)
    out = tmp_path / "run"
    proc = torchrun(["-m", "steadyrl", "train", str(config), "--output-dir", str(out)], timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [m["step"] for m in read_metrics(out)] == [0, 1, 2]
    summary = train(str(config), ["trainer.max_steps=3"], output_dir=str(out), resume=True)
    assert summary["steps"] == 3


@has_vllm
def test_the_vllm_engine_trains_with_truncated_importance_sampling(gpu_config, tmp_path):
    config = gpu_config()
    out = tmp_path / "run"
    train(str(config), ["rollout.engine=vllm", "rollout.tis_cap=2.0", "rollout.vllm.gpu_memory_utilization=0.3"],
          output_dir=str(out))
    step = read_metrics(out)[-1]
    assert 0 < step["rollout/tis_weight_mean"] <= 2.0
    assert abs(step["rollout/logprob_diff_mean"]) < 0.5  # the same weights in both: a small mismatch only
