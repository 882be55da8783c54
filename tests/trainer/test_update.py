"""The update step on a fixed batch: split invariance of the global loss denominators, the
non-finite guard, and a critic that learns."""

import copy
from dataclasses import replace

import pytest
import support
import torch

from steadyrl.config import load_config
from steadyrl.models import ValueModel, load_policy
from steadyrl.trainer.batch import TrainBatch
from steadyrl.trainer.update import ppo_update

CPU = torch.device("cpu")


def _batch(seed: int = 0) -> TrainBatch:
    """8 samples; no rollout log-probs, so the ratio is 1 as in a one-epoch on-policy step."""
    batch = support.tiny_batch(seed=seed, rows=8, response=5)
    return replace(batch, old_logprobs=None, ref_logprobs=None, values=None)


def _config(*overrides):
    return load_config(None, ["trainer.device=cpu", "algorithm.kl_mode=none", *overrides])


def _policy(tiny_model_dir, dtype=torch.float64):
    return load_policy(str(tiny_model_dir), dtype=dtype, device=CPU)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_micro_batch_size_does_not_change_the_update(mode, tiny_model_dir):
    """Global denominators: one micro-batch of 8 or eight of 1 give the same parameters."""
    batch = _batch()
    results = []
    for micro in (8, 3, 1):
        policy = _policy(tiny_model_dir)
        config = _config(f"trainer.micro_batch_size={micro}", f"algorithm.loss_agg_mode={mode}",
                         "optim.lr=0.01")
        opt = torch.optim.SGD(policy.parameters(), lr=0.01)
        ppo_update(policy, opt, batch, config, kl_coef=0.0, device=CPU)
        results.append(torch.cat([p.detach().flatten() for p in policy.parameters()]))
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=1e-12)
    torch.testing.assert_close(results[0], results[2], rtol=0, atol=1e-12)


def test_non_finite_step_is_skipped_before_the_optimizer_touches_anything(tiny_model_dir):
    policy = _policy(tiny_model_dir, torch.float32)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    config = _config()
    ppo_update(policy, opt, _batch(seed=1), config, kl_coef=0.0, device=CPU)  # optimizer state exists now
    params = copy.deepcopy(policy.state_dict())
    state = copy.deepcopy(opt.state_dict())
    poisoned = _batch(seed=2)
    poisoned.advantages[0, 0] = float("nan")
    metrics, steps, skipped = ppo_update(policy, opt, poisoned, config, kl_coef=0.0, device=CPU)
    assert (steps, skipped) == (1, 1)
    for name, value in policy.state_dict().items():
        assert torch.equal(value, params[name]), name
    after = opt.state_dict()
    for key, slot in state["state"].items():
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(after["state"][key][name], slot[name])
    assert all(p.grad is None for p in policy.parameters())


def test_critic_value_loss_falls_on_a_fixed_batch(tiny_model_dir):
    policy = _policy(tiny_model_dir, torch.float32)
    critic = ValueModel.from_pretrained(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    batch = _batch(seed=3)
    batch.values = torch.zeros_like(batch.returns)
    config = _config("algorithm.preset=ppo", "algorithm.kl_mode=none", "algorithm.value_clip=null", "optim.critic_lr=0.01")
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    critic_opt = torch.optim.AdamW(critic.parameters(), lr=0.01)
    losses = []
    for _ in range(25):
        metrics, _, _ = ppo_update(policy, opt, batch, config, kl_coef=0.0, critic=critic,
                                   critic_optimizer=critic_opt, device=CPU)
        losses.append(metrics["critic/value_loss"])
    assert losses[-1] < 0.3 * losses[0], losses


def test_a_mini_batch_without_valid_tokens_takes_no_optimizer_step(tiny_model_dir):
    """Every sample masked out (failed rewards, difficulty mask, truncation): AdamW would still
    move the weights through its momentum and weight decay. No step is taken; it is counted."""
    policy = _policy(tiny_model_dir, torch.float32)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-2, weight_decay=0.1)
    config = _config("trainer.mini_batch_size=4")
    ppo_update(policy, opt, _batch(seed=1), config, kl_coef=0.0, device=CPU)  # momentum exists now
    params = copy.deepcopy(policy.state_dict())
    empty = _batch(seed=2)
    empty.loss_mask = torch.zeros_like(empty.loss_mask)
    empty.advantages = torch.zeros_like(empty.advantages)
    metrics, steps, skipped = ppo_update(policy, opt, empty, config, kl_coef=0.0, device=CPU)
    assert (steps, skipped) == (0, 0)
    assert metrics["health/empty_minibatches"] == 2
    for name, value in policy.state_dict().items():
        assert torch.equal(value, params[name]), name


def _off_policy_batch(policy):
    """A batch whose old log-probs are the policy's own plus noise (ratios spread around 1), and
    the policy's log-probs."""
    from steadyrl.trainer.forward import response_logprobs

    batch = _batch(seed=4)
    with torch.no_grad():
        logp, _ = response_logprobs(policy, batch, temperature=1.0)
    g = torch.Generator().manual_seed(0)
    batch.old_logprobs = logp + 0.3 * torch.randn(logp.shape, generator=g, dtype=logp.dtype)
    return batch, logp


def test_ratio_max_and_min_are_the_extremes_of_the_whole_step(tiny_model_dir):
    """Not a token-weighted mean of each micro-batch's extreme."""
    policy = _policy(tiny_model_dir)
    batch, logp = _off_policy_batch(policy)
    ratio = torch.exp(logp - batch.old_logprobs)[batch.loss_mask.bool()]
    config = _config("trainer.micro_batch_size=2")
    metrics, _, _ = ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.0), batch, config,
                               kl_coef=0.0, device=CPU)
    assert metrics["actor/ratio_max"] == pytest.approx(ratio.max().item(), rel=1e-6)
    assert metrics["actor/ratio_min"] == pytest.approx(ratio.min().item(), rel=1e-6)


def test_a_metric_is_reduced_as_its_loss_declares_not_by_its_name(tiny_model_dir, monkeypatch):
    """ratio_mean declared a max where the loss makes it: the step reports the largest
    micro-batch mean, whatever its name says."""
    from steadyrl.functional import POLICY_LOSS_METRIC_REDUCTIONS

    policy = _policy(tiny_model_dir)
    batch, logp = _off_policy_batch(policy)
    ratio, mask = torch.exp(logp - batch.old_logprobs), batch.loss_mask.bool()
    per_micro = [ratio[i : i + 2][mask[i : i + 2]].mean().item() for i in range(0, len(batch), 2)
                 if mask[i : i + 2].any()]
    monkeypatch.setitem(POLICY_LOSS_METRIC_REDUCTIONS, "ratio_mean", "max")
    config = _config("trainer.micro_batch_size=2")
    metrics, _, _ = ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.0), batch, config,
                               kl_coef=0.0, device=CPU)
    assert len(per_micro) > 1
    assert metrics["actor/ratio_mean"] == pytest.approx(max(per_micro), rel=1e-6)
