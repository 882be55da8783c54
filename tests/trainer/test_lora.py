"""LoRA through PEFT: only adapters train, the reference is the base model with the adapter
switched off (no second copy), checkpoints hold the adapter, and a LoRA run resumes exactly."""


import pytest
import support
import torch

pytest.importorskip("peft")

from steadyrl.config import load_config  # noqa: E402
from steadyrl.tracking import read_metrics  # noqa: E402
from steadyrl.recipe import train  # noqa: E402
from steadyrl.assembly.setup import build_run  # noqa: E402

LORA = {"enabled": True, "r": 4, "alpha": 8.0}


def test_lora_reference_is_the_adapter_switched_off(write_config, task_dir, tmp_path):
    path = write_config(model={"lora": LORA}, algorithm={"kl_mode": "loss", "kl_coef": 0.1})
    run = build_run(load_config(str(path)), tmp_path)
    try:
        assert run.models.reference is None and run.models.uses_adapter_reference
        trainable = [n for n, p in run.models.policy.named_parameters() if p.requires_grad]
        assert trainable and all("lora_" in n for n in trainable)
        ids = torch.tensor([[1, 4, 5, 6, 12]])
        with torch.no_grad():
            for p in run.models.policy.parameters():
                if p.requires_grad:
                    p.add_(0.5)  # move the adapter away from its no-op initialisation
            with run.models.policy.disable_adapter():
                base = run.models.policy(ids).logits
            adapted = run.models.policy(ids).logits
        assert not torch.allclose(base, adapted)
    finally:
        run.task.scorer.close()


def test_lora_run_trains_saves_the_adapter_and_resumes_exactly(write_config, task_dir, tmp_path):
    path = write_config(
        model={"lora": LORA}, algorithm={"kl_mode": "loss", "kl_coef": 0.1},
        rewards=[{"name": f"{task_dir / 'rewards.py'}:partial_reverse"}],
        optim={"lr": 1e-2}, trainer={"max_steps": 4, "save_every": 2, "keep_checkpoints": 3},
    )
    full = tmp_path / "full"
    train(str(path), [], output_dir=str(full))
    policy_dir = full / "checkpoints" / "step_000004" / "policy"
    assert (policy_dir / "adapter_model.safetensors").is_file()
    assert not (policy_dir / "model.safetensors").exists()
    metrics = [m for m in read_metrics(full) if m["step"] > 0]
    assert metrics[-1]["kl/k3"] > 0  # the adapter moved the policy away from the reference

    crashed = support.crashed_copy(full, tmp_path / "crashed", last_step=4, steps_kept=2)
    train(str(path), [], output_dir=str(crashed), resume=True)
    strip = lambda ms: [{k: v for k, v in m.items() if not k.startswith(("time/", "throughput/"))} for m in ms]  # noqa: E731
    assert strip(read_metrics(crashed)) == strip(read_metrics(full))
