"""The engine's bfloat16 copy (rollout.dtype) follows the float32 trainer exactly after every
update, and the weight-sync figures tell a stale copy from a copy that moves in rounding steps."""

import torch
from support_precision import CPU, build_tiny_qwen2, config, two_steps

from steadyrl.config.show import render_config
from steadyrl.models import load_policy, load_tokenizer
from steadyrl.rollout import HFEngine
from steadyrl.rollout.hf import engine_sync_metrics


def _engine(model_dir):
    model = load_policy(str(model_dir), dtype=torch.float32, device=CPU)
    return model, HFEngine(model, load_tokenizer(str(model_dir)), dtype=torch.bfloat16)


def test_the_bfloat16_copy_is_the_trainers_float32_weights_rounded_after_every_update(tmp_path):
    model_dir = build_tiny_qwen2(tmp_path / "m")
    model, engine = _engine(model_dir)
    _, _, trained, _ = two_steps(model_dir, config("float32"))  # weights after 2 real steps at lr 1e-6
    model.load_state_dict(trained.state_dict())
    engine.update_weights(model)
    for (name, p), q in zip(model.state_dict().items(), engine.model.state_dict().values()):
        assert q.dtype == torch.bfloat16 and torch.equal(q, p.to(torch.bfloat16)), name
    sync = engine_sync_metrics(engine)
    assert sync["rollout/weight_sync_max_diff"] == 0.0
    assert sync["rollout/weight_sync_changed_frac"] < 0.5  # lr 1e-6 moves few bf16 entries (float32: 0.95): rounding, not staleness


def test_a_real_change_shows_in_the_changed_fraction_and_a_stale_copy_in_the_diff(tmp_path):
    model_dir = build_tiny_qwen2(tmp_path / "m")
    model, engine = _engine(model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.25)
    engine.update_weights(model)
    sync = engine_sync_metrics(engine)
    assert sync["rollout/weight_sync_max_diff"] == 0.0 and sync["rollout/weight_sync_changed_frac"] > 0.5
    with torch.no_grad():  # the trainer moves on; a copy that is not refreshed is stale
        for p in model.parameters():
            p.mul_(1.25)
    from steadyrl.rollout.hf import _sample, weight_sync_figures

    stale = weight_sync_figures(_sample(engine.model), engine.model, model)
    assert stale["rollout/weight_sync_max_diff"] > 0 and stale["rollout/weight_sync_changed_frac"] == 0.0


def test_an_engine_on_the_training_model_itself_reports_no_sync_figures(tmp_path):
    model_dir = build_tiny_qwen2(tmp_path / "m")
    model = load_policy(str(model_dir), dtype=torch.float32, device=CPU)
    engine = HFEngine(model, load_tokenizer(str(model_dir)))
    engine.update_weights(model)
    assert engine_sync_metrics(engine) == {}


def test_config_show_says_what_each_copy_is_stored_computed_and_sampled_in():
    text = render_config(config("auto"))
    assert "on cuda: stored float32, computed bfloat16 (autocast)" in text
    assert "on cpu: stored float32, computed float32" in text and "sampled float32" in text
    lean = render_config(config("bfloat16", "kahan", "rollout.dtype=float32"))
    assert "on cuda: stored bfloat16, computed bfloat16, updated by Kahan" in lean and "sampled float32" in lean
