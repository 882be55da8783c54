"""``rollout.correction.bypass`` with the KL in the reward (issue 30, B6): a token whose engine
log-prob is NaN or inf leaves the loss, and it must not be charged in the KL penalty either. Before,
its log-prob was replaced by 0 and ``kl(0, ref)`` was charged to its row's reward (a return of 0.71
where 0.96 was right)."""

from __future__ import annotations

import math

import pytest
from support import capture_step, length_reward_runs
import torch

from steadyrl.config import load_config
from steadyrl.rollout import HFEngine
from steadyrl import recipe as recipe_module
from steadyrl.trainer.batch import batch_from_generation
from steadyrl.trainer.forward import response_logprobs
from steadyrl.trainer.mismatch import bypass_old_logprobs
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards

torch.set_num_threads(1)


class NanEngine(HFEngine):
    """The HF engine returning the policy's own log-probs, NaN on the first token of sample 0 and
    -inf on the second token of sample 1."""

    def __init__(self, model, tokenizer, temperature: float):
        super().__init__(model, tokenizer)
        self.temperature = temperature

    def generate(self, prompt_ids, n, **kwargs):
        gen = super().generate(prompt_ids, n, **kwargs)
        with torch.no_grad():
            logp, _ = response_logprobs(self.model, batch_from_generation(gen), temperature=self.temperature)
        logp = torch.where(gen.response_mask.bool(), logp, torch.zeros(()))
        logp[0, 0] = float("nan")
        if gen.response_mask[1, 1]:
            logp[1, 1] = float("-inf")
        gen.rollout_logprobs = logp
        return gen


def test_a_nonfinite_engine_logprob_is_not_charged_in_the_kl_penalty(tiny_model_dir, tmp_path, monkeypatch):
    build = length_reward_runs(tiny_model_dir, tmp_path, rollout={"dtype": "float32"}, trainer={"seed": 3})
    run = build("rollout.correction.bypass=true", "algorithm.kl_mode=reward", "algorithm.kl_coef=0.5",
                "algorithm.kl_estimator=k1")
    seen = capture_step(monkeypatch)
    recipe_module.train_step(run, NanEngine(run.models.policy, run.models.tokenizer, run.config.rollout.temperature), 1)
    batch = seen["batch"]
    bad = ~torch.isfinite(batch.rollout_logprobs) & batch.response_mask.bool()
    assert bad[0, 0]
    # the dropped tokens' old log-prob is the reference's: kl(old, ref) = 0 for every estimator
    torch.testing.assert_close(batch.old_logprobs[bad], batch.ref_logprobs[bad])
    assert not (batch.loss_mask.bool() & bad).any()  # and they are out of the loss


def test_the_return_of_a_row_with_a_nan_engine_logprob_matches_the_float64_oracle():
    """One sample, 3 tokens, score 1, k1 at coefficient 0.5: the row's return is
    ``1 - 0.5 * sum over the charged tokens of (old - ref)`` (GAE at lambda 1 with zero values: the
    first token's return is the row's sum); the NaN token is not charged."""
    algo = load_config(None, ["algorithm.kl_mode=reward", "algorithm.advantage_estimator=gae", "algorithm.lam=1",
                              "algorithm.kl_estimator=k1", "algorithm.reward_clip=null",
                              "algorithm.whiten_advantages=false"]).algorithm
    rollout = torch.tensor([[-1.0, float("nan"), -0.5]])
    ref = torch.tensor([[-1.02, -0.5, -0.54]])
    old = bypass_old_logprobs(rollout, ref)
    mask = torch.ones(1, 3, dtype=torch.long)
    got = process_rewards(RewardInputs(torch.tensor([1.0]), torch.tensor([True]), mask, torch.tensor([False]), 1,
                                       old_logprobs=old, ref_logprobs=ref, values=torch.zeros(1, 3)),
                          algo, RewardSettings(kl_coef=0.5))
    want = 1.0 - 0.5 * ((-1.0 - -1.02) + (-0.5 - -0.54))
    assert want == pytest.approx(0.97)
    assert not math.isclose(want, 1.0 - 0.5 * ((-1.0 - -1.02) + (0.0 - -0.5) + (-0.5 - -0.54)))
    assert float(got.returns[0, 0]) == pytest.approx(want, rel=1e-6)


def test_without_a_reference_a_nonfinite_engine_logprob_is_still_replaced_by_zero():
    old = bypass_old_logprobs(torch.tensor([[-1.0, float("nan"), float("inf"), float("-inf")]]))
    assert old.tolist() == [[-1.0, 0.0, 0.0, 0.0]]
    ref = torch.tensor([[-2.0, float("nan"), -3.0, -4.0]])  # a non-finite reference: 0, never NaN
    assert bypass_old_logprobs(torch.tensor([[-1.0, float("nan"), float("inf"), float("-inf")]]), ref).tolist() == [
        [-1.0, 0.0, -3.0, -4.0]]
