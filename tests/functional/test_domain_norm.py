"""normalize_rewards_by_domain: each domain normalised on its own, against a float64 oracle."""

import math

import pytest
import torch

from steadyrl.functional import normalize_rewards, normalize_rewards_by_domain
from steadyrl.functional.constants import NORM_EPS


def oracle(scores, domains, valid, eps=NORM_EPS):
    """Plain-Python float64 batch normalisation within each domain (unbiased std)."""
    out = [0.0] * len(scores)
    for d in set(domains):
        rows = [i for i in range(len(scores)) if domains[i] == d and valid[i]]
        if not rows:
            continue
        mean = math.fsum(scores[i] for i in rows) / len(rows)
        var = math.fsum((scores[i] - mean) ** 2 for i in rows) / (len(rows) - 1) if len(rows) > 1 else 0.0
        for i in rows:
            out[i] = (scores[i] - mean) / (math.sqrt(var) + eps)
    return out


def test_each_domain_matches_the_float64_oracle():
    g = torch.Generator().manual_seed(0)
    scores = torch.cat([torch.rand(8, generator=g, dtype=torch.float64) * 100,  # a domain on a large scale
                        torch.rand(8, generator=g, dtype=torch.float64) * 0.01])  # and one on a tiny scale
    domains = torch.tensor([0] * 8 + [1] * 8)
    valid = torch.ones(16, dtype=torch.bool)
    valid[3] = False
    got = normalize_rewards_by_domain(scores, domains, 2, mask=valid)
    want = oracle(scores.tolist(), domains.tolist(), valid.tolist())
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-9)
    # each domain ends up with mean 0 and std ~1: the tiny-scale domain is not drowned by the large one
    for d in (0, 1):
        rows = (domains == d) & valid
        assert abs(float(got[rows].mean())) < 1e-7  # masked_mean divides by n + 1e-8
        assert abs(float(got[rows].std()) - 1) < 1e-3


def test_differs_from_whole_batch_normalisation():
    scores = torch.tensor([10.0, 12.0, 0.0, 1.0], dtype=torch.float64)
    domains = torch.tensor([0, 0, 1, 1])
    whole = normalize_rewards(scores, 2, "batch", "batch")
    split = normalize_rewards_by_domain(scores, domains, 2)
    assert not torch.allclose(whole, split)
    assert split[0] < 0 < split[1] and split[2] < 0 < split[3]


@pytest.mark.parametrize("case", ["one_sample", "equal", "empty", "all_invalid"])
def test_hostile_domains_give_no_nan(case):
    scores = torch.tensor([1.0, 2.0, 5.0, 5.0, 3.0, 7.0], dtype=torch.float32)
    domains = torch.tensor([0, 0, 1, 1, 2, 2])
    valid = torch.ones(6, dtype=torch.bool)
    if case == "one_sample":
        valid[5] = False  # domain 2 keeps one valid sample
    elif case == "empty":
        domains = torch.tensor([0, 0, 1, 1, 7, 7])
        valid[4:] = False  # domain 7 has no valid sample
    elif case == "all_invalid":
        valid[:] = False
    got = normalize_rewards_by_domain(scores, domains, 2, mask=valid)
    assert torch.isfinite(got).all()
    assert got.dtype == torch.float32
    want = oracle(scores.double().tolist(), domains.tolist(), valid.tolist())
    assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), atol=1e-5)
    assert (got[~valid] == 0).all()
    if case == "equal":
        assert (got[2:4] == 0).all()


def test_group_mean_within_domains_equals_group_normalisation():
    scores = torch.tensor([1.0, 3.0, 10.0, 30.0], dtype=torch.float64)
    domains = torch.tensor([0, 0, 1, 1])
    assert torch.allclose(normalize_rewards_by_domain(scores, domains, 2, "group", "group"),
                          normalize_rewards(scores, 2, "group", "group"))


def test_running_statistics_are_refused():
    with pytest.raises(ValueError, match="running"):
        normalize_rewards_by_domain(torch.zeros(2), torch.zeros(2, dtype=torch.long), 1, "running", "none")


def test_inputs_not_modified():
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0])
    before = scores.clone()
    normalize_rewards_by_domain(scores, torch.tensor([0, 0, 1, 1]), 2)
    assert torch.equal(scores, before)
