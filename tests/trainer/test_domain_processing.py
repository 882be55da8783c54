"""process_rewards with algorithm.reward_norm_by_domain: each domain's rewards normalised on their own."""

import torch

from steadyrl.config.schema import AlgorithmConfig
from steadyrl.functional import normalize_rewards_by_domain
from steadyrl.trainer.step import domain_ids
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards


def _run(by_domain: bool, domains):
    # two groups of 2 in domain "a" (rewards 0..100), two in domain "b" (rewards 0..1)
    scores = torch.tensor([0.0, 100.0, 50.0, 60.0, 0.0, 1.0, 0.5, 0.6], dtype=torch.float64)
    algo = AlgorithmConfig(preset="dr_grpo", advantage_estimator="grpo", norm_by_std=False, reward_norm_mean="batch",
                           reward_norm_std="batch", reward_norm_by_domain=by_domain, kl_mode="none")
    mask = torch.ones(8, 3, dtype=torch.long)
    out = process_rewards(RewardInputs(scores, torch.ones(8, dtype=torch.bool), mask,
                                       torch.zeros(8, dtype=torch.bool), 2, domains=domains), algo)
    return scores, out


def test_each_domain_gets_the_same_advantage_scale():
    ids = domain_ids(["a"] * 4 + ["b"] * 4)
    scores, out = _run(True, ids)
    adv = out.advantages[:, 0].double()
    assert torch.allclose(adv[:4], adv[4:], atol=1e-4)  # the 0..1 domain is no longer 100x smaller
    normalised = normalize_rewards_by_domain(scores, ids, 2)
    assert torch.allclose(adv, normalised - normalised.reshape(4, 2).mean(-1).repeat_interleave(2), atol=1e-5)


def test_without_the_option_the_large_domain_dominates():
    _, out = _run(False, domain_ids(["a"] * 4 + ["b"] * 4))
    adv = out.advantages[:, 0].abs()
    assert adv[:4].max() > 50 * adv[4:].max()


def test_domain_ids_number_domains_in_order_of_appearance():
    assert domain_ids(["math", "code", "math", None]).tolist() == [0, 1, 0, 2]
    assert domain_ids(None) is None
