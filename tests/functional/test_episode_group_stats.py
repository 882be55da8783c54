"""Step-wise group statistics (issue 30, item 19): an episode of ``t`` turns is ``t`` rows that share
its reward, laid out as ``episode_size`` contiguous rows per episode (empty slots are invalid rows).
RLOO leaves the sample's whole episode out of its baseline (its sibling turns included it before, so
the baseline depended on the sample); ``group_stats="episode"`` counts each episode once in the
group's mean and std (GRPO, RLOO's baseline, REINFORCE++'s baseline), ``"sample"`` counts each row.
A float64 oracle written with lists, and hypothesis tests: groups of one episode, equal rewards,
episodes of different turn counts, hostile scales and dtypes."""

import math
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest
import torch

from steadyrl.functional import compute_advantages

torch.set_num_threads(1)

ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline")


def layout(groups):
    """``groups``: per group, per episode, the list of its rows' scores (its turns). -> scores [B],
    valid [B], episode_size, group_size: every episode padded to the most turns with invalid rows."""
    k = max([1] + [len(turns) for g in groups for turns in g])
    scores, valid = [], []
    for g in groups:
        for turns in g:
            scores += turns + [0.0] * (k - len(turns))
            valid += [True] * len(turns) + [False] * (k - len(turns))
    return torch.tensor(scores, dtype=torch.float64), torch.tensor(valid), k, k * len(groups[0])


def oracle(groups, name, counting, norm_by_std=True, eps=1e-6):
    """Per row (valid rows only, in order), the advantage by definition."""
    out = []
    for g in groups:
        episodes = [t for t in g if t]
        values = [statistics.fmean(t) for t in episodes] if counting == "episode" else [s for t in episodes for s in t]
        mean = statistics.fmean(values) if values else 0.0
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        for e, turns in enumerate(g):
            for s in turns:
                if name == "grpo":
                    out.append((s - mean) / (std + eps) if norm_by_std else s - mean)
                elif name == "reinforce_plus_plus_baseline":
                    out.append(s - mean)
                else:  # rloo: the mean over the other episodes (their rows, or their values)
                    others = [t for f, t in enumerate(g) if f != e and t]
                    pool = ([statistics.fmean(t) for t in others] if counting == "episode"
                            else [x for t in others for x in t])
                    out.append(s - statistics.fmean(pool) if pool else 0.0)
    return out


def advantages(groups, name, counting, **kwargs):
    scores, valid, k, n = layout(groups)
    mask = valid.unsqueeze(-1).expand(-1, 2).clone()
    adv, _ = compute_advantages(name, mask, scores=scores, group_size=n, sample_mask=valid, episode_size=k,
                                group_stats=counting, **kwargs)
    assert adv[~valid].eq(0).all()
    return adv[valid][:, 0], adv


def test_rloo_leaves_the_samples_whole_episode_out_of_its_baseline():
    # episode 1: three turns, reward 1; episode 2: one turn, reward 0
    groups = [[[1.0, 1.0, 1.0], [0.0]]]
    for counting in ("sample", "episode"):
        got, _ = advantages(groups, "rloo", counting)
        assert got.tolist() == pytest.approx([1.0, 1.0, 1.0, -1.0])  # not 1/3: the siblings are not a baseline
        assert got.tolist() == pytest.approx(oracle(groups, "rloo", counting))


def test_episode_counting_counts_a_long_episode_once_in_grpos_mean_and_std():
    groups = [[[1.0, 1.0, 1.0, 1.0], [0.0], [0.0]]]
    episode, _ = advantages(groups, "grpo", "episode")
    sample, _ = advantages(groups, "grpo", "sample")
    assert episode.tolist() == pytest.approx(oracle(groups, "grpo", "episode"), rel=1e-7)
    assert sample.tolist() == pytest.approx(oracle(groups, "grpo", "sample"), rel=1e-7)
    mean = 1 / 3  # three episodes, one success
    assert float(episode[0]) == pytest.approx((1 - mean) / (statistics.stdev([1.0, 0.0, 0.0]) + 1e-6))
    # counted per row, the 4-turn success counts 4 times: the mean is 2/3, the success's advantage
    # shrinks and each failure's grows more negative
    assert float(sample[0]) < float(episode[0]) and float(sample[4]) < float(episode[4]) < 0


@pytest.mark.parametrize("name", ESTIMATORS)
def test_one_row_per_episode_gives_todays_advantages_whatever_the_counting(name):
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(12, generator=g, dtype=torch.float64)
    valid = torch.rand(12, generator=g) < 0.8
    mask = torch.ones(12, 3, dtype=torch.bool)
    before, _ = compute_advantages(name, mask, scores=scores, group_size=4, sample_mask=valid)
    for counting in ("episode", "sample"):
        got, _ = compute_advantages(name, mask, scores=scores, group_size=4, sample_mask=valid, episode_size=1,
                                    group_stats=counting)
        assert torch.equal(got, before)


def test_bad_episode_layouts_and_countings_are_refused_by_name():
    mask = torch.ones(6, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="episode_size"):
        compute_advantages("rloo", mask, scores=torch.zeros(6), group_size=6, episode_size=4)
    with pytest.raises(ValueError, match="group_stats"):
        compute_advantages("grpo", mask, scores=torch.zeros(6), group_size=6, episode_size=2, group_stats="turn")


@st.composite
def episode_groups(draw):
    """Groups of episodes of 1..4 turns (some empty: a failed episode), scores sharing the episode's
    reward plus a per-turn part (a KL penalty in the reward differs per turn)."""
    n_groups, n_eps = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["normal", "equal", "binary"]))
    scale = draw(st.sampled_from([1e6, 1.0, 1e-30, 0.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    groups = []
    for _ in range(n_groups):
        level = float(torch.randn((), generator=g)) * scale
        group = []
        for _ in range(n_eps):
            turns = draw(st.integers(0 if n_eps > 1 else 1, 4))
            base = level if kind == "equal" else (float(torch.rand((), generator=g) < 0.5) * scale if kind == "binary"
                                                   else float(torch.randn((), generator=g)) * scale)
            jitter = 0.0 if kind != "normal" else 0.01 * scale
            group.append([base + jitter * float(torch.randn((), generator=g)) for _ in range(turns)])
        groups.append(group)
    return groups, kind


@settings(max_examples=80, deadline=None)
@given(data=episode_groups(), name=st.sampled_from(ESTIMATORS), counting=st.sampled_from(["episode", "sample"]),
       dtype=st.sampled_from([torch.float64, torch.float32, torch.bfloat16]))
def test_episode_statistics_are_finite_match_the_oracle_and_vanish_without_spread(data, name, counting, dtype):
    groups, kind = data
    scores, valid, k, n = layout(groups)
    mask = valid.unsqueeze(-1).expand(-1, 2).clone()
    adv, _ = compute_advantages(name, mask, scores=scores.to(dtype), group_size=n, sample_mask=valid,
                                episode_size=k, group_stats=counting)
    assert bool(torch.isfinite(adv).all()) and adv[~mask].eq(0).all()
    got = adv[valid][:, 0]
    if kind == "equal" or all(sum(1 for t in g if t) == 1 for g in groups) and name == "rloo":
        assert got.eq(0).all(), got.tolist()  # no spread, or no other episode: no signal
    if dtype == torch.float64 and name != "reinforce_plus_plus_baseline":  # that one is whitened after
        want = oracle(groups, name, counting)
        scale = max([abs(s) for g in groups for t in g for s in t] + [1e-300])
        tol = 1e-6 if name == "grpo" else 1e-9 * scale
        assert got.tolist() == pytest.approx(want, rel=1e-6, abs=tol)
    if name == "grpo" and kind == "equal":
        assert got.abs().max() == 0
    if name == "grpo" and counting == "sample":
        assert got.abs().max() <= (len(got) - 1) / math.sqrt(max(len(got), 1)) + 1e-4
