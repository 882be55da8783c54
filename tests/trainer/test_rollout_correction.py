"""``rollout.correction`` through real training steps: a bf16 engine beside a float32 trainer makes
the mismatch metrics non-zero; an engine whose log-probs are shifted by a known amount per sample
shows what each mode truncates, masks and weights; observation tokens never count; ``bypass``
takes the engine's log-probs as ``old_logprobs`` without the recompute pass; bad settings exit 2."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
from support import capture_step, length_reward_runs
import torch
import yaml

from steadyrl.config import load_config
from steadyrl.errors import ConfigError
from steadyrl.rollout import HFEngine
from steadyrl.run.report import sample_rows
from steadyrl import recipe as recipe_module
from steadyrl.trainer import step as step_module
from steadyrl.trainer.batch import batch_from_generation
from steadyrl.trainer.forward import response_logprobs
from steadyrl.trainer.mismatch import importance_correction

torch.set_num_threads(1)

SHIFTS = (0.0, -1.0, 1.0, 0.0)
"""Per sample (cycled over the batch): the engine's log-prob of each token is the trainer's plus
this, so the token ratio ``w = p_train / p_rollout`` is ``exp(-shift)``: 1, e, 1/e, 1."""


class ShiftEngine(HFEngine):
    """The HF engine returning the policy's own log-probs of the sampled tokens, plus ``SHIFTS[i]``
    on every token of sample ``i`` (a stand-in for an engine with a known gap)."""

    def __init__(self, model, tokenizer, temperature: float):
        super().__init__(model, tokenizer)
        self.temperature = temperature

    def generate(self, prompt_ids, n, **kwargs):
        gen = super().generate(prompt_ids, n, **kwargs)
        with torch.no_grad():
            logp, _ = response_logprobs(self.model, batch_from_generation(gen), temperature=self.temperature)
        shift = torch.tensor([SHIFTS[i % len(SHIFTS)] for i in range(len(gen))]).unsqueeze(1)
        gen.rollout_logprobs = torch.where(gen.response_mask.bool(), logp + shift, torch.zeros(()))
        return gen


@pytest.fixture
def make_run(tiny_model_dir, tmp_path):
    # rollout.dtype: a setting whose engine returns log-probs (the ShiftEngine stands in for it)
    return length_reward_runs(tiny_model_dir, tmp_path, rollout={"dtype": "float32"}, trainer={"seed": 3})


def _capture(monkeypatch):
    return capture_step(monkeypatch)


def _shift_step(make_run, monkeypatch, *overrides):
    run = make_run(*overrides)
    seen = _capture(monkeypatch)
    engine = ShiftEngine(run.models.policy, run.models.tokenizer, run.config.rollout.temperature)
    metrics, extras = recipe_module.train_step(run, engine, 1)
    shift = torch.tensor([SHIFTS[i % len(SHIFTS)] for i in range(len(seen["batch"].advantages))])
    return metrics, seen["batch"], seen["processed"], shift


def test_a_bf16_engine_beside_an_fp32_trainer_gives_non_zero_mismatch_metrics(make_run, monkeypatch):
    from steadyrl.rollout import build_engine

    run = make_run("rollout.dtype=bfloat16", "trainer.samples_every=1")
    engine = build_engine("hf", run.models.generator, run.models.tokenizer, run.config.rollout)
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    assert next(run.models.policy.parameters()).dtype == torch.float32
    metrics, extras = recipe_module.train_step(run, engine, 1)
    assert metrics["mismatch/k3"] > 0 and metrics["mismatch/k1"] != 0
    assert metrics["mismatch/ratio_max"] > 1 > metrics["mismatch/ratio_min"]
    assert 0 < metrics["mismatch/ess"] < 1 and metrics["mismatch/ppl_ratio"] != 1
    assert metrics["mismatch/truncated_frac"] == 0 == metrics["mismatch/masked_token_frac"]  # no correction asked
    rows = sample_rows(extras)
    worst = rows[0]["mismatch_tokens"]
    assert 1 <= len(worst) <= 3 and all(isinstance(t["token"], str) for t in worst)
    gaps = [abs(t["logprob_train"] - t["logprob_rollout"]) for t in worst]
    assert gaps == sorted(gaps, reverse=True) and gaps[0] > 0


def test_truncate_weights_each_token_by_its_ratio_capped(make_run, monkeypatch):
    metrics, batch, processed, shift = _shift_step(make_run, monkeypatch, "rollout.correction.mode=truncate")
    weight = torch.exp(-shift).clamp(max=2.0).unsqueeze(1)
    torch.testing.assert_close(batch.advantages, processed.advantages * weight, rtol=1e-5, atol=1e-6)
    assert torch.equal(batch.loss_mask, processed.loss_mask)  # nothing dropped
    tokens = processed.loss_mask.sum(-1)
    assert metrics["mismatch/truncated_frac"] == pytest.approx(float(tokens[shift == -1].sum() / tokens.sum()))
    assert metrics["mismatch/masked_token_frac"] == 0


def test_mask_drops_the_tokens_outside_the_bounds_and_weights_the_rest_by_their_ratio(make_run, monkeypatch):
    metrics, batch, processed, shift = _shift_step(make_run, monkeypatch, "rollout.correction.mode=mask",
                                                   "rollout.correction.high=2")
    out = shift != 0  # ratios e and 1/e leave [0.5, 2]
    assert not batch.loss_mask[out].any() and not batch.advantages[out].any()
    torch.testing.assert_close(batch.loss_mask[~out], processed.loss_mask[~out])
    torch.testing.assert_close(batch.advantages[~out], processed.advantages[~out], rtol=1e-5, atol=1e-6)
    tokens = processed.loss_mask.sum(-1)
    assert metrics["mismatch/masked_token_frac"] == pytest.approx(float(tokens[out].sum() / tokens.sum()))
    assert metrics["mismatch/masked_seq_frac"] == pytest.approx(float(out.float().mean()))
    assert math.isfinite(seen_loss(batch))


def seen_loss(batch) -> float:
    return float((batch.advantages * batch.loss_mask).sum())


def test_truncate_and_mask_together_drop_outside_the_bounds_and_cap_inside(make_run, monkeypatch):
    metrics, batch, processed, shift = _shift_step(
        make_run, monkeypatch, "rollout.correction.mode=truncate+mask", "rollout.correction.low=0.5",
        "rollout.correction.high=3.0", "rollout.correction.cap=1.5")
    dropped, capped = shift == 1, shift == -1  # 1/e < 0.5: out; e < 3: in, capped at 1.5
    assert not batch.loss_mask[dropped].any()
    torch.testing.assert_close(batch.advantages[capped], processed.advantages[capped] * 1.5, rtol=1e-5, atol=1e-6)
    assert metrics["mismatch/truncated_frac"] > 0 and metrics["mismatch/masked_token_frac"] > 0


def test_sequence_level_truncation_weights_every_token_by_its_sequences_ratio(make_run, monkeypatch):
    metrics, batch, processed, shift = _shift_step(
        make_run, monkeypatch, "rollout.correction.mode=truncate", "rollout.correction.level=sequence",
        "rollout.correction.cap=100")
    length = processed.loss_mask.sum(-1)
    weight = torch.exp(-shift * length).clamp(max=100.0).unsqueeze(1)  # the product over the sequence
    torch.testing.assert_close(batch.advantages, processed.advantages * weight, rtol=1e-4, atol=1e-5)


def test_the_geometric_mask_drops_whole_sequences_whose_mean_ratio_leaves_the_bounds(make_run, monkeypatch):
    metrics, batch, processed, shift = _shift_step(make_run, monkeypatch, "rollout.correction.mode=geometric")
    out = shift != 0
    assert not batch.loss_mask[out].any()
    torch.testing.assert_close(batch.advantages[~out], processed.advantages[~out], rtol=1e-5, atol=1e-6)
    assert metrics["mismatch/masked_seq_frac"] == pytest.approx(float(out.float().mean()))


@pytest.mark.parametrize("loss, agg", [("ppo", "token-mean"), ("gspo", "seq-mean-token-mean"),
                                       ("cispo", "token-mean"), ("vanilla_pg", "seq-mean-token-sum-norm")])
def test_every_loss_and_aggregation_trains_on_the_corrected_batch(make_run, monkeypatch, loss, agg):
    metrics, batch, processed, shift = _shift_step(
        make_run, monkeypatch, "rollout.correction.mode=truncate+mask", "rollout.correction.high=2",
        f"algorithm.policy_loss={loss}",
        f"algorithm.loss_agg_mode={agg}")
    assert not batch.loss_mask[shift == 1].any()
    assert math.isfinite(metrics["actor/loss"]) and metrics["health/skipped_steps"] == 0


def test_tis_cap_is_still_the_token_truncate_case_with_its_old_metrics(make_run, monkeypatch):
    metrics, batch, processed, shift = _shift_step(make_run, monkeypatch, "rollout.tis_cap=2.0")
    weight = torch.exp(-shift).clamp(max=2.0).unsqueeze(1)
    torch.testing.assert_close(batch.advantages, processed.advantages * weight, rtol=1e-5, atol=1e-6)
    assert "rollout/tis_weight_mean" in metrics and "rollout/tis_clip_frac" in metrics
    tokens = processed.loss_mask.sum(-1)
    assert metrics["mismatch/truncated_frac"] == pytest.approx(float(tokens[shift == -1].sum() / tokens.sum()))


def test_bypass_takes_the_engines_logprobs_as_old_logprobs_without_a_recompute(make_run, monkeypatch):
    run = make_run("rollout.dtype=bfloat16", "rollout.correction.bypass=true", "trainer.ppo_epochs=2",
                   "algorithm.kl_coef=0")  # no reference: any forward pass in prepare would be old_logprobs
    seen = _capture(monkeypatch)
    calls = []
    real = step_module.response_logprobs
    monkeypatch.setattr(step_module, "response_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k))
    engine = HFEngine(run.models.policy, run.models.tokenizer, dtype=torch.bfloat16)
    generated = []
    original = engine.generate
    engine.generate = lambda *a, **k: generated.append(original(*a, **k)) or generated[-1]
    metrics, _ = recipe_module.train_step(run, engine, 1)
    assert calls == []  # prepare ran no forward pass for old_logprobs
    gen = generated[0]
    batch = seen["batch"]
    mask = gen.response_mask.bool()
    assert torch.equal(batch.old_logprobs[mask], gen.rollout_logprobs.float()[mask])
    assert not any(k.startswith("mismatch/") for k in metrics)
    assert metrics["rollout/nan_logprob_tokens"] == 0


def _whole(old, rollout, policy, domains=None):
    return SimpleNamespace(old_logprobs=old, rollout_logprobs=rollout, policy_mask=policy,
                           result=SimpleNamespace(domains=domains))


def _rollout(**correction):
    settings = [f"rollout.correction.{k}={v}" for k, v in correction.items()]
    return load_config(None, ["rollout.dtype=float32", *settings]).rollout


def test_observation_tokens_never_count_nor_get_masked():
    """Two episodes whose observation tokens (policy mask 0) carry a huge gap: the measurement
    and the mask see only the policy's tokens."""
    old = torch.full((2, 6), -1.0)
    rollout = old.clone()
    policy = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 0, 1, 1, 0]])
    rollout[policy == 0] = -30.0  # observations: the engine never sampled them
    rollout[1, 5] = float("nan")  # padding-like, outside the policy mask
    loss_mask = policy.float()
    adv, mask, metrics = importance_correction(_rollout(mode="mask"), _whole(old, rollout, policy), torch.ones(2, 6),
                                               loss_mask)
    assert torch.equal(mask, loss_mask) and torch.equal(adv * mask, loss_mask)
    assert metrics["mismatch/k1"] == 0 and metrics["mismatch/k3"] == 0
    assert metrics["mismatch/ratio_max"] == 1 == metrics["mismatch/ratio_min"]
    assert metrics["mismatch/masked_token_frac"] == 0 and metrics["mismatch/nonfinite_tokens"] == 0


def test_the_metrics_are_split_per_domain():
    old = torch.zeros(3, 2)
    rollout = torch.tensor([[0.0, 0.0], [-1.0, -1.0], [0.0, 0.0]])
    policy = torch.ones(3, 2)
    whole = _whole(old, rollout, policy, ["math", "code", None])
    _, _, metrics = importance_correction(_rollout(mode="mask", high=2), whole, torch.ones(3, 2), policy.clone())
    assert metrics["mismatch/domain/math/k3"] == 0 == metrics["mismatch/domain/null/k3"]
    assert metrics["mismatch/domain/code/k3"] == pytest.approx(math.e - 2, rel=1e-5)  # r = e: e - 1 - 1
    assert metrics["mismatch/domain/code/masked_seq_frac"] == 1 and metrics["mismatch/domain/math/masked_seq_frac"] == 0
    assert metrics["mismatch/masked_seq_frac"] == pytest.approx(1 / 3)


def test_a_nonfinite_engine_logprob_is_dropped_and_counted_never_weighted_one():
    old = torch.zeros(1, 3)
    rollout = torch.tensor([[0.0, float("inf"), float("nan")]])
    policy = torch.ones(1, 3)
    adv, mask, metrics = importance_correction(_rollout(mode="truncate"), _whole(old, rollout, policy),
                                               torch.ones(1, 3), policy.clone())
    assert mask.tolist() == [[1.0, 0.0, 0.0]] and adv[0, 1:].abs().sum() == 0
    assert metrics["mismatch/nonfinite_tokens"] == 2


@pytest.mark.parametrize("overrides, words", [
    (["rollout.correction.mode=icepop"], ["rollout.correction.mode", "icepop", "truncate"]),
    (["rollout.correction.mode=mask", "rollout.correction.low=2", "rollout.correction.high=1"],
     ["rollout.correction.low", "2", "high"]),
    (["rollout.correction.mode=mask", "rollout.correction.low=1", "rollout.correction.high=1"],
     ["rollout.correction.low", "below"]),
    (["rollout.correction.cap=0"], ["rollout.correction.cap", "greater than 0"]),
    (["rollout.correction.cap=-1"], ["rollout.correction.cap"]),
    (["rollout.correction.level=episode"], ["rollout.correction.level", "token", "sequence"]),
    (["rollout.tis_cap=2", "rollout.correction.mode=mask"], ["rollout.tis_cap", "rollout.correction.mode"]),
    (["rollout.correction.bypass=true"], ["rollout.correction.bypass", "rollout.dtype"]),
    (["rollout.correction.mode=truncate"], ["rollout.correction.mode", "'truncate'", "rollout.dtype"]),
    (["rollout.dtype=bfloat16", "rollout.correction.bypass=true", "rollout.correction.mode=mask"],
     ["bypass", "rollout.correction.mode"]),
])
def test_bad_correction_settings_are_refused_naming_the_key(overrides, words):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_a_bad_mode_exits_2_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "steadyrl", "config", "show", "rollout.correction.mode=icepop"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "rollout.correction.mode" in proc.stderr


def test_asynchronous_rollouts_keep_their_default_cap_unless_the_correction_replaces_it():
    assert load_config(None, ["rollout.asynchronous.max_staleness=1"]).rollout.tis_cap == 2.0
    config = load_config(None, ["rollout.asynchronous.max_staleness=1", "rollout.correction.mode=mask"])
    assert config.rollout.tis_cap is None
    assert config.rollout.correction.modes(None) == ("token", {"mask": {"low": 0.5, "high": 5.0}})
    geometric = load_config(None, ["rollout.dtype=bfloat16", "rollout.correction.mode=geometric"]).rollout.correction
    assert (geometric.low, geometric.high) == (0.99, 1.01)


@pytest.mark.slow
def test_the_asynchronous_worker_samples_in_rollout_dtype_and_its_batches_are_corrected(tiny_model_dir, tmp_path):
    """The worker builds its policy in bf16 and returns its log-probs; the trainer (float32) masks
    and measures with rollout.correction, its default cap 2.0 replaced."""
    from steadyrl.demo.task import make_splits
    from steadyrl.tracking import read_jsonl
    from steadyrl.recipe import train

    rows, _ = make_splits(16, 0, min_len=3, max_len=4, seed=0)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text(
        "def length(prompts, completions, **columns):\n    return [float(len(c) % 3) for c in completions]\n")
    config = {"model": {"name_or_path": str(tiny_model_dir)}, "data": {"train_path": str(tmp_path / "train.jsonl")},
              "rewards": [{"name": f"{tmp_path / 'rewards.py'}:length"}],
              "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 5, "dtype": "bfloat16",
                          "asynchronous": {"max_staleness": 0}, "correction": {"mode": "truncate+mask"}},
              "algorithm": {"kl_mode": "none"},
              "trainer": {"max_steps": 2, "save_every": 0, "device": "cpu", "num_threads": 1, "samples_every": 0},
              "eval": {"num_samples": 0}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    train(str(path), [], output_dir=str(tmp_path / "run"))
    steps = [m for m in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "mismatch/k3" in m]
    assert len(steps) == 2
    assert all(m["mismatch/k3"] > 0 and m["mismatch/ratio_max"] != 1 for m in steps)  # bf16 worker, fp32 trainer
    assert all("rollout/tis_weight_mean" not in m for m in steps)  # the correction replaced the default cap
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["rollout"]["tis_cap"] is None and saved["rollout"]["correction"]["high"] == 5.0
