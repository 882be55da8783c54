"""Observation tokens of a multi-turn episode are attended to and never trained on.

A hand-built two-turn episode, ``[turn 1 | observation | turn 2]`` after the prompt:

* through the update's own micro-step (PPO loss, KL loss, entropy bonus) the gradient reaching
  the log-probs and entropies of observation tokens is exactly 0, and not 0 on the turns';
* the masked loss equals a float64 oracle that only sums the policy's tokens;
* reward processing gives observation tokens no reward, advantage or loss-mask entry, counts
  only the policy's tokens, and puts an earlier turn's environment reward on that turn's last
  token (GAE) while every row still sums to its processed score.
"""

import pytest
import torch

import support
from steadyrl.config.schema import AlgorithmConfig, Config
from steadyrl.functional import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
from steadyrl.functional.constants import MASK_EPS
from steadyrl.trainer import update as update_module
from steadyrl.trainer.batch import TrainBatch
from steadyrl.trainer.processing import process_rewards

PROMPT = [1, 5, 6, 7]
TURN1, OBS, TURN2 = [8, 9, 2], [10, 11, 4, 5], [9, 8, 2]
POLICY = [1] * len(TURN1) + [0] * len(OBS) + [1] * len(TURN2)


def two_turn_batch(rows: int = 2) -> TrainBatch:
    response = torch.tensor([TURN1 + OBS + TURN2] * rows)
    policy = torch.tensor([POLICY] * rows)
    full = torch.ones_like(response)
    prompt = torch.tensor([PROMPT] * rows)
    attention = torch.cat([torch.ones_like(prompt), full], 1)
    g = torch.Generator().manual_seed(0)
    return TrainBatch(input_ids=torch.cat([prompt, response], 1), attention_mask=attention,
                      position_ids=(attention.cumsum(-1) - 1).clamp(min=0), response_ids=response,
                      response_mask=full, policy_mask=policy, loss_mask=policy.clone(),
                      advantages=torch.randn(response.shape, generator=g) * policy,
                      old_logprobs=-2.0 + 0.1 * torch.randn(response.shape, generator=g),
                      ref_logprobs=-2.2 + 0.1 * torch.randn(response.shape, generator=g))


def test_observation_tokens_get_exactly_zero_gradient(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(support.build_tiny_lm(tmp_path))
    captured = {}

    def capturing(*args, **kwargs):
        logp, entropy = real(*args, **kwargs)
        logp.retain_grad()
        entropy.retain_grad()
        captured.update(logp=logp, entropy=entropy)
        return logp, entropy

    real = update_module.response_logprobs
    monkeypatch.setattr(update_module, "response_logprobs", capturing)
    config = Config.model_validate({"algorithm": {"kl_mode": "loss", "kl_coef": 0.5, "entropy_coef": 0.1},
                                    "trainer": {"logprob_impl": "naive"}})
    batch = two_turn_batch()
    agg = {"global_tokens": float(batch.loss_mask.sum()), "global_seqs": float(len(batch))}
    loss = update_module._policy_micro_step(model, batch, config, agg, 0.5, update_module.Metrics(), True)
    loss.backward()
    obs = torch.tensor(POLICY) == 0
    for name in ("logp", "entropy"):
        grad = captured[name].grad
        assert torch.equal(grad[:, obs], torch.zeros_like(grad[:, obs])), name
        assert grad[:, ~obs].abs().sum() > 0, name


def test_masked_two_turn_loss_matches_a_float64_oracle():
    batch = two_turn_batch(rows=3)
    g = torch.Generator().manual_seed(1)
    logp = (-2.0 + 0.3 * torch.randn(batch.response_ids.shape, generator=g)).double()
    old, adv, mask = batch.old_logprobs.double(), batch.advantages.double(), batch.loss_mask
    loss, _ = POLICY_LOSSES["ppo"](logp, old, adv, mask, clip_low=0.2, clip_high=0.2, dual_clip=None,
                                   loss_agg_mode="token-mean")
    total, count = 0.0, 0
    for i in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if not POLICY[t]:
                continue
            ratio = float(torch.exp(logp[i, t] - old[i, t]))
            a = float(adv[i, t])
            total += max(-a * ratio, -a * min(max(ratio, 0.8), 1.2))
            count += 1
    assert abs(float(loss) - total / (count + MASK_EPS)) < 1e-12  # token-mean over the policy's tokens only


def test_processing_never_rewards_or_trains_observation_tokens():
    batch = two_turn_batch(rows=4)
    scores = torch.tensor([1.0, 0.0, 0.5, 0.25])
    algo = AlgorithmConfig(advantage_estimator="grpo", kl_mode="reward", kl_coef=0.1)
    out = process_rewards(scores, torch.ones(4, dtype=torch.bool), batch.policy_mask, torch.zeros(4, dtype=torch.bool),
                          algo, 4, kl_coef=0.1, old_logprobs=batch.old_logprobs, ref_logprobs=batch.ref_logprobs)
    obs = torch.tensor(POLICY) == 0
    assert torch.equal(out.loss_mask[:, obs], torch.zeros_like(out.loss_mask[:, obs]))
    assert torch.equal(out.advantages[:, obs], torch.zeros_like(out.advantages[:, obs]))
    assert torch.equal(out.loss_mask, batch.policy_mask)


def test_earlier_turn_rewards_sit_on_their_turn_for_gae():
    batch = two_turn_batch(rows=2)
    turn_rewards = torch.zeros(batch.response_ids.shape, dtype=torch.float64)
    turn_rewards[:, len(TURN1) - 1] = 0.25  # turn 1's reward on its last token
    algo = AlgorithmConfig(preset="ppo", advantage_estimator="gae", kl_mode="none", gamma=1.0, lam=1.0)
    values = torch.zeros(batch.response_ids.shape)
    scores = torch.tensor([1.0, -1.0])
    out = process_rewards(scores, torch.ones(2, dtype=torch.bool), batch.policy_mask, torch.zeros(2, dtype=torch.bool),
                          algo, 1, values=values, turn_rewards=turn_rewards)
    # gamma = lam = 1, V = 0: the return of a token is the sum of the rewards from it on, the
    # observation tokens skipped. Turn 2's tokens see only what the last token holds: s - 0.25.
    t2 = len(TURN1) + len(OBS)
    assert torch.allclose(out.returns[:, t2].double(), scores.double() - 0.25)
    assert torch.allclose(out.returns[:, 0].double(), scores.double())  # the whole episode from turn 1
    obs = torch.tensor(POLICY) == 0
    assert torch.equal(out.returns[:, obs], torch.zeros_like(out.returns[:, obs]))


@pytest.mark.parametrize("estimator", sorted(ADVANTAGE_ESTIMATORS))
def test_every_estimator_works_on_episodes(estimator):
    """Outcome and token-level estimators alike: finite advantages, none on observation tokens,
    the loss mask exactly the policy's tokens, with an earlier turn's reward on its own token."""
    batch = two_turn_batch(rows=4)
    turn_rewards = torch.zeros(batch.response_ids.shape, dtype=torch.float64)
    turn_rewards[:, len(TURN1) - 1] = torch.tensor([0.5, 0.0, -0.5, 1.0], dtype=torch.float64)
    algo = AlgorithmConfig(advantage_estimator=estimator, kl_mode="none", whiten_advantages=True)
    values = torch.zeros(batch.response_ids.shape) if estimator == "gae" else None
    out = process_rewards(torch.tensor([1.0, 0.0, 0.5, 2.0]), torch.ones(4, dtype=torch.bool), batch.policy_mask,
                          torch.zeros(4, dtype=torch.bool), algo, 4, values=values, turn_rewards=turn_rewards)
    obs = torch.tensor(POLICY) == 0
    assert torch.isfinite(out.advantages).all() and torch.isfinite(out.returns).all()
    assert torch.equal(out.advantages[:, obs], torch.zeros_like(out.advantages[:, obs]))
    assert torch.equal(out.loss_mask, batch.policy_mask)
    assert out.advantages[:, ~obs].abs().sum() > 0
