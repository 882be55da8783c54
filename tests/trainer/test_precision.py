"""Precision that learns (issue 29): after 2 steps at lr 1e-6 the trained weights move like
float32's in the GPU default (float32 weights, bfloat16 autocast: emulated on the CPU, whose
bfloat16 arithmetic is the GPU's) and with bfloat16 weights under a compensated update; plain
AdamW on bfloat16 weights loses them and is refused; a resume keeps every master value exactly."""

import io

import pytest
import torch
from support_precision import CPU, LR, batch, build_tiny_qwen2, config, two_steps

from steadyrl.assembly.setup import build_models, build_optimizer
from steadyrl.errors import ConfigError, ModelLoadError
from steadyrl.models import resolve_precision
from steadyrl.precision import describe_settings, precision_plan
from steadyrl.trainer.optim import LowPrecisionAdamW, UpdateProbe, stochastic_round_to_bf16, trained_value
from steadyrl.trainer.update import ppo_update

TOLERANCE = 0.03  # "within a few percent" of float32's fraction


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return build_tiny_qwen2(tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="module")
def float32_moved(qwen_dir):
    moved, _, _, _ = two_steps(qwen_dir, config("float32"))
    assert moved > 0.9
    return moved


def test_auto_on_a_gpu_stores_float32_and_computes_in_bfloat16_and_the_cpu_is_unchanged():
    gpu = precision_plan("auto", "kahan", "cuda")
    assert (gpu.stored, gpu.computed, gpu.update, gpu.autocast) == ("float32", "bfloat16", "adamw", True)
    cpu = precision_plan("auto", "kahan", "cpu")
    assert (cpu.stored, cpu.computed, cpu.autocast) == ("float32", "float32", False)
    old_gpu = precision_plan("auto", "kahan", "cuda", bf16_supported=False)
    assert old_gpu.computed == "float32"
    lean = precision_plan("bfloat16", "kahan", "cuda")
    assert (lean.stored, lean.computed, lean.update) == ("bfloat16", "bfloat16", "kahan")
    assert precision_plan("bfloat16", "kahan", "cuda", rollout_dtype="float16").sampled == "float16"


def test_every_setting_says_what_is_stored_computed_updated_and_sampled():
    lines = describe_settings()
    assert len(lines) == 8
    assert all(("stored" in line and "computed" in line and "sampled" in line) or "refused" in line
               for line in lines)


def test_the_gpu_default_really_computes_in_bfloat16(qwen_dir):
    plan = precision_plan("auto", "kahan", "cuda")
    policy, _, _, _ = build_models(config("auto"), str(qwen_dir), CPU, plan)
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    out = policy(torch.tensor([[3, 4, 5]])).logits
    assert out.dtype == torch.bfloat16  # the matmuls ran under autocast
    assert not torch.is_autocast_enabled("cpu")  # and it was left when the forward ended


def test_the_gpu_default_moves_the_weights_like_float32(qwen_dir, float32_moved):
    moved, _, _, _ = two_steps(qwen_dir, config("auto"), device_type="cuda")
    assert abs(moved - float32_moved) < TOLERANCE


@pytest.mark.parametrize("update", ["kahan", "master"])
def test_bfloat16_weights_with_a_compensated_update_move_like_float32(update, qwen_dir, float32_moved):
    moved, _, policy, opt = two_steps(qwen_dir, config("bfloat16", update))
    assert all(p.dtype == torch.bfloat16 for p in policy.parameters())
    assert isinstance(opt, LowPrecisionAdamW)
    assert abs(moved - float32_moved) < TOLERANCE


def test_plain_adamw_on_bfloat16_weights_loses_almost_every_update(qwen_dir, float32_moved):
    """The failure of issue 29, reproduced: why plain is refused at this lr."""
    cfg = config("bfloat16", "kahan")
    moved, _, _, opt = two_steps(qwen_dir, cfg, optimizer_update="plain")
    assert type(opt) is torch.optim.AdamW
    assert moved < 0.1 < float32_moved


def test_plain_bfloat16_at_a_small_lr_is_refused_naming_the_keys_and_the_fix():
    with pytest.raises(ConfigError, match="model.bf16_update = 'plain'.*optim.lr.*model.dtype=auto"):
        config("bfloat16", "plain")
    config("bfloat16", "plain", "optim.lr=2e-4")  # large enough steps: allowed


def test_float16_on_the_cpu_is_an_error_naming_model_dtype():
    with pytest.raises(ModelLoadError, match="model.dtype = 'float16'"):
        resolve_precision(config("float16").model, CPU)


def test_the_critic_moves_like_float32_in_the_gpu_default(qwen_dir):
    gae = ("algorithm.advantage_estimator=gae",)
    _, ref, _, _ = two_steps(qwen_dir, config("float32", "kahan", *gae), with_critic=True)
    _, moved, _, _ = two_steps(qwen_dir, config("auto", "kahan", *gae), device_type="cuda", with_critic=True)
    assert ref > 0.5 and abs(moved - ref) < TOLERANCE


@pytest.mark.parametrize("dtype,device", [("auto", "cuda"), ("bfloat16", "cpu")])
def test_lora_adapters_move_like_float32(dtype, device, qwen_dir):
    pytest.importorskip("peft")
    lora = ("model.lora.enabled=true", "model.lora.r=4")
    ref, _, _, _ = two_steps(qwen_dir, config("float32", "kahan", *lora))
    moved, _, policy, _ = two_steps(qwen_dir, config(dtype, "kahan", *lora), device_type=device)
    assert ref > 0.2  # lora_B starts at zero: half the adapter moves on the first steps
    assert abs(moved - ref) < TOLERANCE


def test_stochastic_rounding_is_right_on_average_but_moves_few_weights_per_step():
    x = torch.full((200_000,), 0.02, dtype=torch.float32) + 3e-5  # a quarter of a spacing above 0.02's bf16
    base = torch.tensor(0.02).to(torch.bfloat16).float()
    rounded = stochastic_round_to_bf16(x).float()
    assert set(rounded.unique().tolist()) <= {float(base), float(base + 2**-13)}
    assert abs(float(rounded.mean()) - float(x.mean())) < 1e-6
    assert float(stochastic_round_to_bf16(torch.tensor([float("inf")])).float()) == float("inf")


def _saved_and_loaded(opt_state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(opt_state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("update", ["kahan", "master", "stochastic_rounding"])
def test_a_resume_keeps_the_compensation_and_master_state_exactly(update, qwen_dir):
    """state.pt round trip (torch.save / weights_only load, as run/checkpoint.py does): the float32
    moments and the compensation or master copy come back bit for bit and in their own dtypes."""
    cfg = config("bfloat16", update)
    _, _, policy, opt = two_steps(qwen_dir, cfg)
    fresh = build_optimizer(policy.parameters(), cfg.optim, LR, update)
    fresh.load_state_dict(_saved_and_loaded(opt.state_dict()))
    for p in policy.parameters():
        for key, value in opt.state[p].items():
            assert fresh.state[p][key].dtype == value.dtype, key
            assert torch.equal(fresh.state[p][key], value), key
        assert torch.equal(trained_value(p, fresh), trained_value(p, opt))
    assert opt.state[next(iter(policy.parameters()))]["exp_avg_sq"].dtype == torch.float32


def test_the_gpu_default_checkpoint_keeps_float32_weights_exactly(qwen_dir, tmp_path):
    from steadyrl.run.checkpoint import _save_model, load_model_weights

    _, _, policy, _ = two_steps(qwen_dir, config("auto"), device_type="cuda")
    _save_model(policy, tmp_path / "policy")
    again, _, _, _ = build_models(config("auto"), str(qwen_dir), CPU, precision_plan("auto", "kahan", "cuda"))
    load_model_weights(again, tmp_path / "policy")
    for (name, a), b in zip(policy.named_parameters(), again.parameters()):
        assert b.dtype == torch.float32 and torch.equal(a, b), name


def test_the_update_probe_reports_the_step_and_zero_for_no_step(qwen_dir):
    cfg = config("float32", "kahan")
    policy, _, _, _ = build_models(cfg, str(qwen_dir), CPU, precision_plan("float32", "kahan", "cpu"))
    opt = build_optimizer(policy.parameters(), cfg.optim, 0.0)  # lr 0: a step that moves nothing
    metrics, _, _ = ppo_update(policy, opt, batch(), cfg, kl_coef=0.0, device=CPU)
    assert metrics["actor/update_ratio"] == 0.0 and metrics["actor/params_changed_frac"] == 0.0
    assert metrics["actor/update_rms"] == 0.0
    probe = UpdateProbe([p for p in policy.parameters()], opt, per_tensor=8)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1e-3)  # every weight moves by 1e-3: the motion per weight is 1e-3
    got = probe.metrics()
    assert got["actor/params_changed_frac"] > 0.5 and got["actor/update_rms"] == pytest.approx(1e-3, rel=1e-2)
    probe = UpdateProbe([p for p in policy.parameters()], opt, per_tensor=8)
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(1.5)
    got = probe.metrics()
    assert got["actor/params_changed_frac"] > 0.5 and got["actor/update_ratio"] == pytest.approx(0.5, rel=1e-5)


def test_preflight_warns_about_plain_bfloat16_at_an_lr_that_loses_large_weights(capsys):
    from steadyrl.precision import precision_warnings

    cfg = config("bfloat16", "plain", "optim.lr=2e-4")
    (warning,) = precision_warnings(cfg.model, cfg.optim)
    assert "model.bf16_update = 'plain'" in warning and "optim.lr = 0.0002" in warning and "kahan" in warning
    assert precision_warnings(config("bfloat16", "kahan").model, cfg.optim) == []
    assert precision_warnings(config("auto").model, cfg.optim) == []
    sr = config("bfloat16", "stochastic_rounding")
    assert "stochastic_rounding" in precision_warnings(sr.model, sr.optim)[0]


def test_vllm_samples_the_gpu_default_in_bfloat16_and_copies_keep_the_autocast(qwen_dir):
    """vLLM loads the policy in computed_dtype_of(policy): bfloat16 for float32 weights under autocast."""
    import copy

    from steadyrl.precision import computed_dtype_of

    policy, _, _, _ = build_models(config("auto"), str(qwen_dir), CPU, precision_plan("auto", "kahan", "cuda"))
    assert computed_dtype_of(policy) == "bfloat16"
    reference = copy.deepcopy(policy)  # build_models' reference: a deep copy, hooks and all
    assert computed_dtype_of(reference) == "bfloat16"
    assert reference(torch.tensor([[3, 4]])).logits.dtype == torch.bfloat16
    plain, _, _, _ = build_models(config("float32"), str(qwen_dir), CPU, precision_plan("float32", "kahan", "cpu"))
    assert computed_dtype_of(plain) is None


def test_the_cli_refuses_plain_bfloat16_at_lr_1e_6_with_exit_2(tmp_path, capsys):
    from steadyrl import cli

    assert cli.main(["train", "--output-dir", str(tmp_path / "run"), "model.dtype=bfloat16",
                     "model.bf16_update=plain", "optim.lr=1e-6"]) == 2
    err = capsys.readouterr().err
    assert "model.bf16_update = 'plain'" in err and "model.dtype=auto" in err
    assert not (tmp_path / "run").exists()


def test_the_preflight_prints_the_precision_warning_before_training(write_config, tmp_path, capsys):
    from steadyrl.config import load_config
    from steadyrl.preflight.inputs import check_train

    path = write_config(model={"dtype": "bfloat16", "bf16_update": "plain"}, optim={"lr": 2e-4})
    check_train(load_config(str(path)), output_dir=str(tmp_path / "run"), resume=False, overwrite=False)
    assert "steadyrl: warning: model.dtype = 'bfloat16' with model.bf16_update = 'plain'" in capsys.readouterr().err
