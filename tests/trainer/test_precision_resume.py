"""A resume keeps what was trained exactly, in every precision: bfloat16 weights with their Kahan
compensation, and the GPU default's float32 weights under bfloat16 autocast (emulated on the CPU);
the trained weights of a resumed run equal the uninterrupted run's bit for bit."""

import pytest
import support
import torch
from safetensors.torch import load_file

from steadyrl.precision import precision_plan
from steadyrl.tracking import read_metrics
from steadyrl.recipe import train


def _weights(run_dir):
    return load_file(run_dir / "final" / "model.safetensors")


@pytest.mark.slow
@pytest.mark.parametrize("dtype,device_type", [("bfloat16", "cpu"), ("auto", "cuda")])
def test_a_resumed_run_ends_with_the_uninterrupted_runs_weights(dtype, device_type, write_config, task_dir,
                                                                 tmp_path, monkeypatch):
    import steadyrl.assembly.setup as setup

    monkeypatch.setattr(setup, "resolve_precision",
                        lambda m, device, rollout=None: precision_plan(m.dtype, m.bf16_update, device_type))
    config = write_config(
        model={"dtype": dtype},
        rewards=[{"name": f"{task_dir / 'rewards.py'}:partial_reverse"}],
        optim={"lr": 1e-5},
        trainer={"max_steps": 4, "save_every": 2, "keep_checkpoints": 3},
    )
    full = tmp_path / "full"
    train(str(config), [], output_dir=str(full))
    crashed = support.crashed_copy(full, tmp_path / "crashed", last_step=4, steps_kept=2)
    train(str(config), [], output_dir=str(crashed), resume=True)
    metrics = read_metrics(full)
    assert all(m["actor/params_changed_frac"] > 0.5 for m in metrics[1:])  # the weights really moved
    saved = torch.load(full / "checkpoints" / "step_000004" / "state.pt", weights_only=True)["optimizer"]["state"]
    if dtype == "bfloat16":
        assert all("compensation" in s and s["exp_avg_sq"].dtype == torch.float32 for s in saved.values())
    a, b = _weights(full), _weights(crashed)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == (torch.bfloat16 if dtype == "bfloat16" else torch.float32)
        assert torch.equal(a[name], b[name]), name
