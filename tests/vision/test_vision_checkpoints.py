"""A vision-language model's checkpoints and final model keep its processor: steadyrl eval and a
resumed run load the image processor from them as from the base model."""

import pytest
import torch

from steadyrl.config.schema import LoraConfig
from steadyrl.demo.vision_model import build_tiny_llava, build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.models import apply_lora, load_policy
from steadyrl.run import checkpoint as ckpt
from steadyrl.run.export import export_checkpoint
from steadyrl.vlm import load_processor

BUILDERS = {"qwen2_vl": build_tiny_qwen2_vl, "llava": build_tiny_llava}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def base(request, tmp_path_factory):
    tok = build_vision_tokenizer("abc ?", request.param)
    model, processor = BUILDERS[request.param](tok)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path, processor


def test_a_checkpoint_and_its_export_hold_the_processor(base, tmp_path):
    path, processor = base
    policy = load_policy(str(path), dtype=torch.float32, device=torch.device("cpu"))
    step = ckpt.save_checkpoint(tmp_path / "checkpoints", 1, policy=policy, tokenizer=processor, state={"step": 1})
    for directory in (step / "policy", export_checkpoint(step, tmp_path / "final", merge_lora=False)):
        loaded = load_processor(str(directory), local_files_only=True)
        assert type(loaded.image_processor).__name__ == type(processor.image_processor).__name__
        assert type(load_policy(str(directory), dtype=torch.float32, device=torch.device("cpu"))) is type(policy)


def test_a_lora_vlm_merged_on_export_keeps_the_processor(base, tmp_path):
    pytest.importorskip("peft")
    path, processor = base
    policy = apply_lora(load_policy(str(path), dtype=torch.float32, device=torch.device("cpu")),
                        LoraConfig(enabled=True, r=2))
    step = ckpt.save_checkpoint(tmp_path / "checkpoints", 1, policy=policy, tokenizer=processor, state={"step": 1})
    out = export_checkpoint(step, tmp_path / "final", merge_lora=True, base=str(path))
    assert load_processor(str(out), local_files_only=True).image_processor is not None
