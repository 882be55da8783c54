"""Grouped estimators with a sample mask: an invalid sample (its reward function failed) must not
move its group's statistics, and gets advantage 0."""

import pytest
import torch

from steadyrl.functional import ADVANTAGE_ESTIMATORS, compute_advantages

GROUPED = sorted(name for name, est in ADVANTAGE_ESTIMATORS.items() if est.grouped)


@pytest.mark.parametrize("name", GROUPED)
def test_invalid_sample_is_ignored_as_if_it_were_not_in_the_group(name):
    torch.manual_seed(0)
    n = 4
    scores = torch.tensor([0.1, 0.9, 0.4, 123.0, 0.5, 0.2, 0.8, 0.3], dtype=torch.float64)
    mask = torch.ones(8, 5, dtype=torch.long)
    mask[1, 3:] = 0
    valid = torch.ones(8, dtype=torch.bool)
    valid[3] = False  # garbage score that must not count
    adv, _ = compute_advantages(name, mask, scores=scores, group_size=n, sample_mask=valid)
    assert (adv[3] == 0).all()
    # The first group's three valid samples, alone: the same advantages as a group of 3.
    if name == "reinforce_plus_plus_baseline":  # whitened over the batch: build the expectation by hand
        centred = scores.clone()
        centred[:3] -= scores[:3].mean()
        centred[4:] -= scores[4:].mean()
        tokens = [float(centred[i]) for i in range(8) if i != 3 for t in range(5) if mask[i, t]]
        mean = sum(tokens) / len(tokens)
        std = (sum((x - mean) ** 2 for x in tokens) / (len(tokens) - 1)) ** 0.5
        expected = (centred - mean) / std
        for i in (0, 1, 2, 4, 5, 6, 7):
            torch.testing.assert_close(adv[i][mask[i].bool()], expected[i].expand(int(mask[i].sum())),
                                       rtol=1e-6, atol=1e-6)
        return
    alone, _ = compute_advantages(name, mask[:3], scores=scores[:3], group_size=3)
    torch.testing.assert_close(adv[:3], alone, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", GROUPED)
def test_a_group_with_every_sample_invalid_gives_zero_not_nan(name):
    scores = torch.tensor([float("nan"), float("inf"), 1.0, 0.0])
    valid = torch.tensor([False, False, True, True])
    adv, _ = compute_advantages(name, torch.ones(4, 3), scores=scores, group_size=2, sample_mask=valid)
    assert torch.isfinite(adv).all()
    assert (adv[:2] == 0).all()
