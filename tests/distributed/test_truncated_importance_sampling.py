"""Truncated importance sampling (rollout.tis_cap) without vLLM: the weights against a
float64 oracle, and through a real training step whose engine returns its own log-probs
(a stand-in for vLLM): advantages times w, the rollout/ metrics, old log-probs recomputed."""

from __future__ import annotations

import math

import pytest
from support import capture_step, length_reward_runs
import torch

from steadyrl.functional.importance import rollout_mismatch_metrics, truncated_importance_weights
from steadyrl.rollout import HFEngine
from steadyrl import recipe as step_module
from steadyrl.trainer.batch import batch_from_generation
from steadyrl.trainer.forward import response_logprobs


def _oracle(logp, rollout, mask, cap):
    diff = (logp.double() - rollout.double()).clamp(-10, 10)
    w = torch.where(mask.bool(), diff.exp().clamp(max=cap), torch.zeros((), dtype=torch.float64))
    return w, diff


def test_weights_are_exp_of_the_clamped_difference_capped():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(6, 7, generator=g) * 4
    rollout = logp + torch.randn(6, 7, generator=g)
    rollout[0, 0] = logp[0, 0] - 50.0  # far off: clamped to 10, then capped
    rollout[1, 1] = logp[1, 1] + 50.0  # the other way: exp(-10)
    mask = (torch.arange(7) < torch.tensor([7, 5, 1, 0, 3, 6]).unsqueeze(1)).long()
    w, metrics = truncated_importance_weights(logp, rollout, mask, cap=2.0)
    expected, diff = _oracle(logp, rollout, mask, 2.0)
    torch.testing.assert_close(w.double(), expected, rtol=1e-6, atol=1e-7)
    assert w[1, 1] == pytest.approx(math.exp(-10), rel=1e-5)
    keep = mask.bool()
    assert metrics["rollout/tis_weight_mean"] == pytest.approx(float(expected[keep].mean()), rel=1e-6)
    assert metrics["rollout/tis_clip_frac"] == pytest.approx(float((diff.exp()[keep] > 2.0).double().mean()))
    assert metrics["rollout/logprob_diff_mean"] == pytest.approx(float(diff[keep].mean()), abs=1e-6)
    assert metrics["rollout/tis_clip_frac"] > 0


def test_padding_never_enters_weights_or_metrics():
    logp = torch.tensor([[-1.0, float("nan")], [-2.0, -3.0]])
    rollout = torch.tensor([[-1.5, float("-inf")], [float("nan"), -3.0]])
    mask = torch.tensor([[1, 0], [0, 1]])
    w, metrics = truncated_importance_weights(logp, rollout, mask, cap=2.0)
    assert torch.isfinite(w).all() and w[0, 1] == 0 and w[1, 0] == 0
    assert w[0, 0] == pytest.approx(math.exp(0.5)) and w[1, 1] == pytest.approx(1.0)
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics["rollout/logprob_diff_mean"] == pytest.approx(0.25)


def test_an_engine_that_returns_minus_inf_gives_a_capped_finite_weight():
    w, metrics = truncated_importance_weights(torch.tensor([[-1.0]]), torch.tensor([[float("-inf")]]),
                                              torch.tensor([[1]]), cap=2.0)
    assert w.item() == 2.0 and metrics["rollout/tis_clip_frac"] == 1.0


def test_no_valid_token_gives_zero_metrics_not_nan():
    w, metrics = truncated_importance_weights(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), cap=2.0)
    assert (w == 0).all() and metrics == {"rollout/tis_weight_mean": 0.0, "rollout/tis_clip_frac": 0.0,
                                          "rollout/logprob_diff_mean": 0.0, "rollout/nan_logprob_tokens": 0.0}
    assert rollout_mismatch_metrics(torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2)) == {
        "rollout/logprob_diff_mean": 0.0, "rollout/nan_logprob_tokens": 0.0}


def test_a_nan_behaviour_logprob_on_a_valid_token_weighs_zero_and_is_counted():
    """The engine lost a token's probability: that token's weight is 0 (it was 1: NaN became a
    difference of 0), it enters no metric, and it is counted; a NaN on padding is not counted."""
    g = torch.Generator().manual_seed(1)
    logp = -torch.rand(4, 5, generator=g) * 3
    rollout = logp + 0.3 * torch.randn(4, 5, generator=g)
    mask = (torch.arange(5) < torch.tensor([5, 3, 4, 2]).unsqueeze(1)).long()
    rollout[0, 1] = rollout[2, 3] = float("nan")  # valid tokens
    rollout[3, 4] = float("nan")  # padding
    w, metrics = truncated_importance_weights(logp, rollout, mask, cap=2.0)
    usable = mask.bool() & ~rollout.isnan()
    expected, diff = _oracle(logp, rollout.nan_to_num(0.0), usable, 2.0)
    torch.testing.assert_close(w.double(), expected, rtol=1e-6, atol=1e-7)
    assert w[0, 1] == 0 and w[2, 3] == 0
    assert metrics["rollout/nan_logprob_tokens"] == 2.0
    assert metrics["rollout/tis_weight_mean"] == pytest.approx(float(expected[usable].mean()), rel=1e-6)
    assert metrics["rollout/logprob_diff_mean"] == pytest.approx(float(diff[usable].mean()), abs=1e-6)
    assert metrics["rollout/tis_clip_frac"] == pytest.approx(float((diff.exp()[usable] > 2.0).double().mean()))
    off = rollout_mismatch_metrics(logp, rollout, mask)
    assert off == {"rollout/logprob_diff_mean": metrics["rollout/logprob_diff_mean"], "rollout/nan_logprob_tokens": 2.0}


@pytest.mark.parametrize("cap", [0.0, -1.0])
def test_cap_must_be_positive(cap):
    with pytest.raises(ValueError, match="cap"):
        truncated_importance_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), cap=cap)


# --- through a training step ---------------------------------------------------------------------

class LogprobEngine(HFEngine):
    """The HF engine, returning the policy's own log-probs of the sampled tokens plus ``shift``
    as ``rollout_logprobs``, as vLLM's would be (shift -1: the engine found every token e times
    less likely than the trainer does)."""

    def __init__(self, model, tokenizer, temperature: float, shift: float):
        super().__init__(model, tokenizer)
        self.temperature, self.shift = temperature, shift

    def generate(self, prompt_ids, n, **kwargs):
        gen = super().generate(prompt_ids, n, **kwargs)
        with torch.no_grad():
            logp, _ = response_logprobs(self.model, batch_from_generation(gen), temperature=self.temperature)
        gen.rollout_logprobs = torch.where(gen.response_mask.bool(), logp + self.shift, torch.zeros(()))
        return gen


@pytest.fixture
def tis_run(tiny_model_dir, tmp_path):
    return length_reward_runs(tiny_model_dir, tmp_path)


def _capture(monkeypatch):
    return capture_step(monkeypatch)


@pytest.mark.parametrize("shift, weight", [(0.0, 1.0), (-1.0, 2.0), (0.5, math.exp(-0.5))])
def test_a_training_step_scales_the_advantages_by_the_capped_weight(shift, weight, tis_run, monkeypatch):
    run = tis_run("rollout.tis_cap=2.0")
    seen = _capture(monkeypatch)
    engine = LogprobEngine(run.models.policy, run.models.tokenizer, run.config.rollout.temperature, shift)
    metrics, _ = step_module.train_step(run, engine, 1)
    batch, processed = seen["batch"], seen["processed"]
    assert batch.old_logprobs is not None  # recomputed by the trainer, not taken from the engine
    assert processed.advantages.abs().sum() > 0
    torch.testing.assert_close(batch.advantages.double(), processed.advantages.double() * weight,
                               rtol=1e-5, atol=1e-6)
    assert metrics["rollout/tis_weight_mean"] == pytest.approx(weight, rel=1e-5)
    assert metrics["rollout/tis_clip_frac"] == (1.0 if shift == -1.0 else 0.0)
    assert metrics["rollout/logprob_diff_mean"] == pytest.approx(-shift, abs=1e-5)


class NanEngine(LogprobEngine):
    """The engine's log-probs, NaN on every response's second token."""

    def generate(self, prompt_ids, n, **kwargs):
        gen = super().generate(prompt_ids, n, **kwargs)
        second = gen.response_mask[:, 1].bool()
        gen.rollout_logprobs[second, 1] = float("nan")
        return gen


def test_a_token_whose_behaviour_logprob_is_nan_leaves_the_loss(tis_run, monkeypatch):
    run = tis_run("rollout.tis_cap=2.0")
    seen = _capture(monkeypatch)
    engine = NanEngine(run.models.policy, run.models.tokenizer, run.config.rollout.temperature, 0.0)
    metrics, _ = step_module.train_step(run, engine, 1)
    batch, processed = seen["batch"], seen["processed"]
    second = processed.loss_mask[:, 1].bool()  # valid tokens for the reward path ...
    assert second.sum() > 0
    assert not batch.loss_mask[:, 1].any() and not batch.advantages[:, 1].any()  # ... out of the loss
    assert torch.equal(batch.loss_mask[:, 2:], processed.loss_mask[:, 2:])
    assert torch.equal(batch.loss_mask[:, 0], processed.loss_mask[:, 0])
    assert metrics["rollout/nan_logprob_tokens"] == float(second.sum())
    assert metrics["rollout/tis_weight_mean"] == pytest.approx(1.0, rel=1e-5)


def test_without_a_cap_the_mismatch_is_measured_and_nothing_is_reweighted(tis_run, monkeypatch):
    run = tis_run()
    seen = _capture(monkeypatch)
    engine = LogprobEngine(run.models.policy, run.models.tokenizer, run.config.rollout.temperature, -1.0)
    metrics, _ = step_module.train_step(run, engine, 1)
    torch.testing.assert_close(seen["batch"].advantages, seen["processed"].advantages)
    assert metrics["rollout/logprob_diff_mean"] == pytest.approx(1.0, abs=1e-5)
    assert "rollout/tis_weight_mean" not in metrics


def test_the_deprecated_vllm_key_still_reweights_the_step(tis_run, monkeypatch):
    run = tis_run("rollout.vllm.tis_cap=2.0")  # the old name of rollout.tis_cap
    assert run.config.rollout.tis_cap == 2.0
    seen = _capture(monkeypatch)
    engine = LogprobEngine(run.models.policy, run.models.tokenizer, run.config.rollout.temperature, -1.0)
    metrics, _ = step_module.train_step(run, engine, 1)
    torch.testing.assert_close(seen["batch"].advantages.double(), seen["processed"].advantages.double() * 2.0,
                               rtol=1e-5, atol=1e-6)
    assert metrics["rollout/tis_clip_frac"] == 1.0
