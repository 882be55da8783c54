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
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards

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
    out = process_rewards(RewardInputs(scores, torch.ones(4, dtype=torch.bool), batch.policy_mask,
                                       torch.zeros(4, dtype=torch.bool), 4, old_logprobs=batch.old_logprobs,
                                       ref_logprobs=batch.ref_logprobs), algo, RewardSettings(kl_coef=0.1))
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
    out = process_rewards(RewardInputs(scores, torch.ones(2, dtype=torch.bool), batch.policy_mask,
                                       torch.zeros(2, dtype=torch.bool), 1, values=values, turn_rewards=turn_rewards),
                          algo)
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
    out = process_rewards(RewardInputs(torch.tensor([1.0, 0.0, 0.5, 2.0]), torch.ones(4, dtype=torch.bool),
                                       batch.policy_mask, torch.zeros(4, dtype=torch.bool), 4, values=values,
                                       turn_rewards=turn_rewards), algo)
    obs = torch.tensor(POLICY) == 0
    assert torch.isfinite(out.advantages).all() and torch.isfinite(out.returns).all()
    assert torch.equal(out.advantages[:, obs], torch.zeros_like(out.advantages[:, obs]))
    assert torch.equal(out.loss_mask, batch.policy_mask)
    assert out.advantages[:, ~obs].abs().sum() > 0


def _oracle_rows(x: list[float], earlier: list[float], clip: float | None, norm: str) -> list[tuple[float, float]]:
    """float64 oracle of steps 1-3 for one group of two-turn episodes: ``(turn 1's token reward,
    last token's)`` per row: clip the episode score, group-normalise, clip again, and scale every
    part of the score by ``alpha = (c / x) * a * (p / s)``; the rest of ``p`` on the last token."""
    c = [x_i if clip is None else min(max(x_i, -clip), clip) for x_i in x]
    if norm == "group":
        mean = sum(c) / len(c)
        std = (sum((v - mean) ** 2 for v in c) / (len(c) - 1)) ** 0.5
        a, b = 1 / (std + 1e-6), -mean / (std + 1e-6)
    else:
        a, b = 1.0, 0.0
    rows = []
    for x_i, c_i, r in zip(x, c, earlier):
        s = a * c_i + b
        p = s if clip is None else min(max(s, -clip), clip)
        alpha = (c_i / x_i if x_i else 1.0) * a * (p / s if s else 1.0)
        rows.append((alpha * r, p - alpha * r))
    return rows


@pytest.mark.parametrize("norm", ["none", "group"])
def test_reward_clip_keeps_every_episode_row_summing_to_its_processed_score(norm):
    """Clip 1, turn rewards [3, 0]: the row summed to 0 (3 and the remainder -3 were each clipped
    per token), not 1. In the group [3, 0, 0.5, 0.2] the best episode's GRPO advantage was -0.741;
    it is +1.322, the advantage of the clipped scores [1, 0, 0.5, 0.2]."""
    batch = two_turn_batch(rows=4)
    turn1_end, last = len(TURN1) - 1, len(POLICY) - 1
    earlier = [3.0, 0.0, 0.5, -0.4]
    turn_rewards = torch.zeros(batch.response_ids.shape, dtype=torch.float64)
    turn_rewards[:, turn1_end] = torch.tensor(earlier, dtype=torch.float64)
    scores = torch.tensor([3.0, 0.0, 0.5, 0.2], dtype=torch.float64)
    args = (torch.ones(4, dtype=torch.bool), batch.policy_mask, torch.zeros(4, dtype=torch.bool))
    kwargs = {"reward_clip": 1.0, "reward_norm_mean": norm, "reward_norm_std": norm, "kl_mode": "none"}

    gae = AlgorithmConfig(advantage_estimator="gae", gamma=1.0, lam=1.0, **kwargs)
    values = torch.zeros(batch.response_ids.shape)
    out = process_rewards(RewardInputs(scores, *args, 4, values=values, turn_rewards=turn_rewards), gae)
    oracle = _oracle_rows(scores.tolist(), earlier, 1.0, norm)
    # gamma = lam = 1, V = 0: a token's return is the sum of the token rewards from it on
    returns = out.returns.double()
    for i, (first, rest) in enumerate(oracle):
        assert returns[i, 0].item() == pytest.approx(first + rest, abs=1e-6)  # the whole row: p
        assert returns[i, last].item() == pytest.approx(rest, abs=1e-6)
    if norm == "none":
        assert returns[0, 0].item() == pytest.approx(1.0, abs=1e-6)

    grpo = AlgorithmConfig(advantage_estimator="grpo", **kwargs)
    adv = process_rewards(RewardInputs(scores, *args, 4, turn_rewards=turn_rewards), grpo).advantages
    c = [1.0, 0.0, 0.5, 0.2]
    if norm == "group":
        c = [a + b for a, b in oracle]
    mean = sum(c) / 4
    std = (sum((v - mean) ** 2 for v in c) / 3) ** 0.5
    assert adv[0, 0].item() == pytest.approx((c[0] - mean) / (std + 1e-6), abs=1e-5)
    if norm == "none":
        assert adv[0, 0].item() == pytest.approx(1.322, abs=1e-3)


def test_normalisation_scales_earlier_turn_rewards_with_the_episode_score():
    """Group normalisation maps every part of the score by the same slope ``1 / (std + eps)``,
    the mean (the baseline) on the last token: turn rewards [3, 0] in the group [3, 0, 0.5, 0.2]
    give the best episode's second turn a return of -mean / std = -0.661; it was s - 3 = -1.52
    (turn 1's 3 left unnormalised beside a normalised total: -2.29 in the reviewers' batch)."""
    batch = two_turn_batch(rows=4)
    turn_rewards = torch.zeros(batch.response_ids.shape, dtype=torch.float64)
    turn_rewards[0, len(TURN1) - 1] = 3.0
    scores = torch.tensor([3.0, 0.0, 0.5, 0.2], dtype=torch.float64)
    algo = AlgorithmConfig(advantage_estimator="gae", gamma=1.0, lam=1.0, kl_mode="none",
                           reward_norm_mean="group", reward_norm_std="group")
    out = process_rewards(RewardInputs(scores, torch.ones(4, dtype=torch.bool), batch.policy_mask,
                                       torch.zeros(4, dtype=torch.bool), 4,
                                       values=torch.zeros(batch.response_ids.shape), turn_rewards=turn_rewards), algo)
    mean = 0.925
    std = (sum((v - mean) ** 2 for v in [3.0, 0.0, 0.5, 0.2]) / 3) ** 0.5
    t2 = len(TURN1) + len(OBS)
    assert out.returns[0, t2].item() == pytest.approx(-mean / (std + 1e-6), abs=1e-5)
    assert out.returns[0, t2].item() == pytest.approx(-0.661, abs=1e-3)
    assert out.returns[0, 0].item() == pytest.approx((3.0 - mean) / (std + 1e-6), abs=1e-5)


def test_kl_in_the_reward_is_clipped_per_token_beside_the_clipped_score():
    """kl_mode reward with reward_clip: each token's penalty kl_coef * KL is clipped on its own,
    the score as a whole, so a row sums to p - sum(clip(kl_coef * KL)) (float64 oracle, k1)."""
    batch = two_turn_batch(rows=2)
    policy = batch.policy_mask.bool()
    old = torch.zeros(batch.response_ids.shape)
    ref = torch.zeros(batch.response_ids.shape)
    ref[0, 0], ref[0, 1] = -3.0, 0.5  # k1 = old - ref: a penalty of 3 clipped to 1, and -0.5
    algo = AlgorithmConfig(advantage_estimator="gae", gamma=1.0, lam=1.0, kl_mode="reward", kl_estimator="k1",
                           reward_clip=1.0)
    scores = torch.tensor([4.0, 0.25], dtype=torch.float64)
    out = process_rewards(RewardInputs(scores, torch.ones(2, dtype=torch.bool), batch.policy_mask,
                                       torch.zeros(2, dtype=torch.bool), 1, old_logprobs=old, ref_logprobs=ref,
                                       values=torch.zeros(batch.response_ids.shape)), algo, RewardSettings(kl_coef=1.0))
    penalty = [min(max(k, -1.0), 1.0) for k in (3.0, -0.5)]
    assert out.returns[0, 0].item() == pytest.approx(1.0 - sum(penalty), abs=1e-6)  # clip(4) = 1, minus 1 - 0.5
    assert out.returns[1, 0].item() == pytest.approx(0.25, abs=1e-6)
    # one token changed by the token-level clip (the penalty of 3); the score 4 was clipped at the
    # response level already (critic/reward_clip_frac), so its normalised value 1 is within the clip
    assert out.metrics["critic/token_reward_clip_frac"] == pytest.approx(1 / int(policy.sum()))
    assert out.metrics["critic/reward_clip_frac"] == 0.5
