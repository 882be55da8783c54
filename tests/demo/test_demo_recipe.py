"""The demo recipe: settings and the builder that warm-starts and saves a loadable model."""

import dataclasses

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from steadyrl.demo.recipe import DemoSettings, prepare_demo


def test_default_settings_leave_room_for_the_longest_answer():
    s = DemoSettings()
    assert s.max_new_tokens >= s.max_len + 1  # answer + <eos>
    assert s.group_size > 1 and s.kl_coef == 0.0 and s.loss_agg_mode == "token-mean"


def test_prepare_demo_warm_starts_and_saves_a_loadable_model(tmp_path):
    settings = dataclasses.replace(
        DemoSettings(), n_train=200, n_eval=20, hidden_size=32, n_heads=2,
        warm_start_steps=3, warm_start_batch_size=8,
    )
    setup = prepare_demo(settings, output_dir=tmp_path)
    assert len(setup.train) == 200 and len(setup.held_out) == 20
    assert len(setup.warm_start["losses"]) == 3
    assert 0.0 <= setup.accuracy_after_warm_start <= 1.0
    model = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tok = AutoTokenizer.from_pretrained(tmp_path)
    batch = tok(["abc="], return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, setup.model(**batch).logits)
