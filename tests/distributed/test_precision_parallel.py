"""Precision under data parallelism (gloo, CPU): after 2 steps at lr 1e-6 the GPU default
(float32 weights, bfloat16 autocast; emulated) moves the weights like float32 under DDP and FSDP2,
and so do bfloat16 weights under the Kahan-compensated update with DDP."""

import pytest
import torch
from dp_common import HERE, launch

from support_precision import build_tiny_qwen2

TOLERANCE = 0.03


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    model_dir = build_tiny_qwen2(tmp_path_factory.mktemp("qwen2"))
    out = tmp_path_factory.mktemp("precision_dp")
    proc = launch([str(HERE / "worker_precision.py"), str(model_dir), str(out)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out / "result.pt", weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize("run", ["ddp/auto-gpu", "ddp/bfloat16-kahan"])
def test_ddp_moves_the_weights_like_float32(run, moved):
    assert moved["ddp/float32"] > 0.9
    assert abs(moved[run] - moved["ddp/float32"]) < TOLERANCE


@pytest.mark.slow
def test_fsdp_in_the_gpu_default_moves_the_weights_like_float32(moved):
    assert moved["fsdp/float32"] > 0.9
    assert abs(moved["fsdp/auto-gpu"] - moved["fsdp/float32"]) < TOLERANCE
