"""Differential tests against TRL 1.16 (the ``dev`` extra pins ``trl==1.16.*``): the formulas TRL has
only inline, inside methods that need a model and a generation (``GRPOTrainer._generate_and_score_completions``,
``RLOOTrainer``'s): the GRPO and GDPO (``multi_objective_aggregation``) advantages, RLOO's
leave-one-out baseline and the vLLM importance-sampling weights. The test carries TRL's lines as
written, in float64, around TRL's own ``nanstd``; steadyrl's functions get TRL's epsilon (1e-4)
as their ``eps`` argument. Hostile cases: equal rewards, groups of one, huge rewards, unscorable
(None / NaN) rewards. The loss functions are compared in test_vs_trl.py.
"""

from __future__ import annotations

import pytest
import torch

trl_utils = pytest.importorskip("trl.trainer.utils")

from steadyrl.functional import (  # noqa: E402
    correct_mismatch,
    grpo_advantages,
    normalize_then_sum,
    rloo_advantages,
)

torch.set_num_threads(1)
TRL_EPS = 1e-4  # TRL's advantage epsilon (steadyrl's NORM_EPS is 1e-6: passed as eps= below)


def _trl_grpo_advantages(rewards, n):
    """TRL 1.16, ``multi_objective_aggregation="sum_then_normalize"``, ``scale_rewards="group"``."""
    mean = torch.nanmean(rewards.view(-1, n), dim=1).repeat_interleave(n, dim=0)
    std = (trl_utils.nanstd(rewards.view(-1, n), dim=1).repeat_interleave(n, dim=0) if n > 1
           else torch.zeros_like(rewards))
    return torch.nan_to_num((rewards - mean) / (std + TRL_EPS), nan=0.0)


def _trl_gdpo_advantages(rewards_per_func, n, weights):
    """TRL 1.16, ``multi_objective_aggregation="normalize_then_sum"``."""
    k = rewards_per_func.shape[1]
    grouped = rewards_per_func.view(-1, n, k)
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = trl_utils.nanstd(grouped, dim=1, keepdim=True) if n > 1 else torch.zeros_like(mean_k)
    reward_k = ((grouped - mean_k) / (std_k + TRL_EPS)).view(-1, k)
    rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    std = trl_utils.nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    return torch.nan_to_num((rewards - torch.nanmean(rewards)) / (std + TRL_EPS), nan=0.0)


@pytest.mark.parametrize("case", ["random", "equal_rewards", "huge", "binary"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_grpo_advantages_equal_trls(case, n):
    g = torch.Generator().manual_seed(n)
    rewards = {"random": torch.randn(3 * n, generator=g, dtype=torch.float64),
               "equal_rewards": torch.full((3 * n,), 0.7, dtype=torch.float64),
               "huge": torch.randn(3 * n, generator=g, dtype=torch.float64) * 1e150,
               "binary": (torch.rand(3 * n, generator=g) < 0.5).double()}[case]
    mask = torch.ones(3 * n, 4)
    ours = grpo_advantages(rewards, mask, n, eps=TRL_EPS)[:, 0]
    torch.testing.assert_close(ours.double(), _trl_grpo_advantages(rewards, n), rtol=1e-6, atol=1e-6)


def test_a_group_of_one_gets_advantage_zero_in_both():
    rewards = torch.tensor([0.3, 1.0, -2.0], dtype=torch.float64)
    ours = grpo_advantages(rewards, torch.ones(3, 2), 1, eps=TRL_EPS)
    assert torch.equal(ours, torch.zeros_like(ours))
    assert torch.equal(_trl_grpo_advantages(rewards, 1), torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [1, 2, 4])
def test_gdpo_advantages_equal_trls_normalize_then_sum(seed, n):
    g = torch.Generator().manual_seed(seed)
    k, groups = 3, 3
    components = torch.randn(groups * n, k, generator=g, dtype=torch.float64)
    components[:, 1] = (components[:, 1] > 0).double()  # a binary reward
    if seed == 1:
        components[:n, 2] = 0.5  # a reward equal within a group: carries nothing there
    weights = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    ours, _ = normalize_then_sum(components, n, weights, eps=TRL_EPS)
    torch.testing.assert_close(ours.double(), _trl_gdpo_advantages(components, n, weights), rtol=1e-6, atol=1e-6)


def test_gdpo_reward_that_does_not_apply_is_left_out_as_trls_none():
    """TRL's None (NaN here) leaves a reward out of its group's statistics and adds 0; steadyrl's
    ``mask`` is the same rule."""
    n = 4
    components = torch.tensor([[1.0, 0.2], [0.0, float("nan")], [1.0, 0.9], [0.0, 0.4],
                               [1.0, 0.1], [1.0, 0.5], [0.0, 0.3], [0.0, 0.8]], dtype=torch.float64)
    valid = ~torch.isnan(components)
    weights = torch.tensor([1.0, 0.5], dtype=torch.float64)
    ours, _ = normalize_then_sum(torch.nan_to_num(components), n, weights, valid, eps=TRL_EPS)
    torch.testing.assert_close(ours.double(), _trl_gdpo_advantages(components, n, weights), rtol=1e-6, atol=1e-6)


def _trl_rloo_advantages(rewards, n):
    """TRL 1.16's RLOOTrainer (``normalize_advantages=False``): the leave-one-out baseline over the
    scorable siblings (a NaN reward is unscorable)."""
    grouped = rewards.view(-1, n)
    scorable = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    baselines = ((torch.nansum(grouped, dim=1, keepdim=True) - grouped) / (scorable - 1)).view(-1)
    return torch.nan_to_num(rewards - baselines if n > 1 else torch.zeros_like(rewards), nan=0.0)


@pytest.mark.parametrize("case", ["random", "equal_rewards", "unscorable", "one_scorable"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_rloo_advantages_equal_trls_leave_one_out(case, n):
    g = torch.Generator().manual_seed(7 + n)
    rewards = torch.randn(3 * n, generator=g, dtype=torch.float64)
    if case == "equal_rewards":
        rewards[:] = 0.25
    elif case == "unscorable":
        rewards[0] = torch.nan
    elif case == "one_scorable":
        rewards[1:n] = torch.nan
    scorable = ~torch.isnan(rewards)
    ours = rloo_advantages(torch.nan_to_num(rewards), torch.ones(3 * n, 3), n, sample_mask=scorable)[:, 0]
    # the group mean is a masked mean over count + 1e-8 (MASK_EPS, seed 000): a relative 1e-8 / n
    torch.testing.assert_close(ours.double(), _trl_rloo_advantages(rewards, n), rtol=2e-8, atol=1e-12)


# --- vLLM importance sampling: TRL's lines against correct_mismatch --------------------------------------

def _trl_is_weights(old, sampling, mask, mode, clip_max, clip_min=None):
    diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = clip_min if clip_min is not None else float("-inf")
    return ratio.masked_fill((ratio < low) | (ratio > clip_max), 0.0)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("trl_mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_vllm_importance_sampling_weights_equal_trls(trl_mode, seed):
    g = torch.Generator().manual_seed(seed)
    B, T = 5, 6
    mask = (torch.arange(T) < torch.randint(1, T + 1, (B, 1), generator=g)).double()
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    sampling = old + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)
    level, mode = trl_mode.split("_")
    clip_max, clip_min = 2.0, 0.5
    if mode == "truncate":
        theirs = _trl_is_weights(old, sampling, mask, trl_mode, clip_max)
        modes = {"truncate": {"cap": clip_max}}
    else:
        theirs = _trl_is_weights(old, sampling, mask, trl_mode, clip_max, clip_min)
        modes = {"mask": {"low": clip_min, "high": clip_max}}
    ours = correct_mismatch(old, sampling, mask, level=level, modes=modes)
    theirs = theirs.expand_as(mask) * mask
    torch.testing.assert_close(ours.weights.double(), theirs, rtol=1e-9, atol=1e-12)
