"""Training-inference mismatch corrections and metrics against a float64 oracle written with
``math`` token by token, plus their behaviour at the edges (non-finite behaviour log-probs,
observation tokens, bad parameters)."""

import math

import pytest
import torch

from steadyrl.functional import CORRECTION_MODES, correct_mismatch, mismatch_metrics, register_correction
from steadyrl.functional.mismatch import ModeResult

torch.set_num_threads(1)


def _inputs(seed, b=5, t=7, spread=0.4, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    rlp = lp + torch.randn(b, t, generator=g, dtype=torch.float64) * spread
    lengths = torch.tensor([t, 1, 0, t - 2, 3][:b])
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    return lp.to(dtype), rlp.to(dtype), mask


def _rows(lp, rlp, mask):
    """Per sequence, the list of (train, rollout) log-prob pairs of its valid tokens, as floats."""
    return [[(float(lp[i, j]), float(rlp[i, j])) for j in range(lp.shape[1]) if mask[i, j]] for i in range(lp.shape[0])]


def oracle(lp, rlp, mask, level, cap=None, bounds=None, geo=None):
    """weights[i][j] for the valid tokens, and the truncated / masked counts, by the definitions."""
    weights, truncated, masked = [], 0, 0
    for row in _rows(lp, rlp, mask):
        d = [a - b for a, b in row]
        seq = math.exp(sum(d)) if row else 1.0
        geo_ok = geo is None or (row and geo[0] <= math.exp(sum(d) / len(d)) <= geo[1])
        out = []
        for dt in d:
            w = math.exp(dt) if level == "token" else seq
            keep = geo_ok and (bounds is None or bounds[0] <= w <= bounds[1])
            if not keep:
                masked += 1
                out.append(0.0)
            elif cap is not None:
                truncated += w > cap
                out.append(min(w, cap))
            else:
                out.append(w if bounds is not None else 1.0)
        weights.append(out)
    return weights, truncated, masked


CASES = [
    ("token", {"truncate": {"cap": 1.2}}, dict(cap=1.2)),
    ("sequence", {"truncate": {"cap": 1.5}}, dict(cap=1.5)),
    ("token", {"mask": {"low": 0.7, "high": 1.4}}, dict(bounds=(0.7, 1.4))),
    ("sequence", {"mask": {"low": 0.5, "high": 2.0}}, dict(bounds=(0.5, 2.0))),
    ("token", {"mask": {"low": 0.7, "high": 1.4}, "truncate": {"cap": 1.1}}, dict(bounds=(0.7, 1.4), cap=1.1)),
    ("token", {"geo_mask": {"low": 0.9, "high": 1.1}}, dict(geo=(0.9, 1.1))),
    ("token", {"geo_mask": {"low": 0.9, "high": 1.1}, "truncate": {"cap": 1.3}}, dict(geo=(0.9, 1.1), cap=1.3)),
]


@pytest.mark.parametrize("level,modes,spec", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_every_correction_matches_the_float64_oracle(level, modes, spec, seed, dtype):
    lp, rlp, mask = _inputs(seed, dtype=dtype)
    got = correct_mismatch(lp, rlp, mask, level=level, modes=modes)
    want, truncated, masked = oracle(lp.double(), rlp.double(), mask, level, **spec)
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    for i, row in enumerate(want):
        cols = mask[i].nonzero().flatten().tolist()
        assert got.weights[i, cols].tolist() == pytest.approx(row, rel=tol, abs=tol)
        assert got.keep[i, cols].tolist() == [w != 0.0 for w in row]
    assert got.weights[~mask].eq(0).all() and not got.keep[~mask].any()
    assert got.counts["truncated"] == truncated and got.counts["masked"] == masked
    assert got.weights.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


@pytest.mark.parametrize("seed", [0, 3])
def test_metrics_match_the_float64_oracle(seed):
    lp, rlp, mask = _inputs(seed, spread=0.3)
    correction = correct_mismatch(lp, rlp, mask, modes={"truncate": {"cap": 1.1}, "mask": {"low": 0.8, "high": 1.5}})
    got = {k.removeprefix("mismatch/"): float(v) for k, v in mismatch_metrics(lp, rlp, mask, correction).items()}
    rows = [r for r in _rows(lp, rlp, mask) if r]
    tokens = [p for r in rows for p in r]
    d = [a - b for a, b in tokens]
    w = [math.exp(x) for x in d]
    n = len(d)
    assert got["k1"] == pytest.approx(sum(-x for x in d) / n, rel=1e-9)
    assert got["k3"] == pytest.approx(sum(math.exp(x) - 1 - x for x in d) / n, rel=1e-9)
    assert got["ppl_train"] == pytest.approx(sum(math.exp(-sum(a for a, _ in r) / len(r)) for r in rows) / len(rows))
    assert got["ppl_rollout"] == pytest.approx(sum(math.exp(-sum(b for _, b in r) / len(r)) for r in rows) / len(rows))
    assert got["ppl_ratio"] == pytest.approx(
        sum(math.exp(-sum(a for a, _ in r) / len(r)) / math.exp(-sum(b for _, b in r) / len(r)) for r in rows) / len(rows))
    assert got["ess"] == pytest.approx(sum(w) ** 2 / (n * sum(x * x for x in w)), rel=1e-9)
    assert got["ratio_max"] == pytest.approx(max(w)) and got["ratio_min"] == pytest.approx(min(w))
    weights, truncated, masked = oracle(lp, rlp, mask, "token", cap=1.1, bounds=(0.8, 1.5))
    assert got["truncated_frac"] == pytest.approx(truncated / n)
    assert got["masked_token_frac"] == pytest.approx(masked / n)
    lost = sum(1 for row in weights if row and not any(row))
    assert got["masked_seq_frac"] == pytest.approx(lost / len(rows)) and got["nonfinite_tokens"] == 0.0


def test_equal_policies_measure_no_gap():
    lp, _, mask = _inputs(5)
    got = mismatch_metrics(lp, lp.clone(), mask)
    assert float(got["mismatch/k1"]) == 0 and float(got["mismatch/k3"]) == 0
    for key in ("ppl_ratio", "ess", "ratio_max", "ratio_min"):
        assert float(got[f"mismatch/{key}"]) == pytest.approx(1.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_a_non_finite_behaviour_logprob_is_dropped_and_counted_never_weighted_one(bad, level):
    lp, rlp, mask = _inputs(0)
    rlp[0, 2] = bad
    got = correct_mismatch(lp, rlp, mask, level=level, modes={"truncate": {"cap": 2.0}})
    assert got.weights[0, 2] == 0 and not got.keep[0, 2]
    assert got.counts["nonfinite"] == 1
    if level == "sequence":  # the sequence's ratio is unknown: the whole sequence goes
        assert not got.keep[0].any() and got.counts["masked_seqs"] == 1
    else:
        assert got.keep[0, :2].all() and got.counts["masked_seqs"] == 0
    metrics = mismatch_metrics(lp, rlp, mask, got)
    assert float(metrics["mismatch/nonfinite_tokens"]) == 1
    assert float(metrics["mismatch/masked_token_frac"]) >= 1 / int(mask.sum())
    assert all(torch.isfinite(v) for v in metrics.values())


def test_a_non_finite_train_logprob_is_dropped_and_counted_too():
    lp, rlp, mask = _inputs(4)
    lp[0, 1] = float("nan")
    got = correct_mismatch(lp, rlp, mask, modes={"mask": {"low": 0.5, "high": 2.0}})
    assert not got.keep[0, 1] and got.weights[0, 1] == 0 and got.counts["nonfinite"] == 1


def test_no_correction_still_drops_non_finite_tokens_and_weighs_the_rest_one():
    lp, rlp, mask = _inputs(1)
    rlp[3, 0] = float("nan")
    got = correct_mismatch(lp, rlp, mask)
    expected = mask.clone()
    expected[3, 0] = False
    assert torch.equal(got.keep, expected) and torch.equal(got.weights, expected.double())


def test_observation_tokens_never_count_even_when_their_logprobs_are_nan():
    lp, rlp, mask = _inputs(2)
    policy = mask.clone()
    policy[0, 3:5] = False  # a tool result inside the episode
    lp[0, 3], rlp[0, 4] = float("nan"), float("inf")
    got = correct_mismatch(lp, rlp, policy, modes={"mask": {"low": 0.5, "high": 2.0}})
    assert got.counts["nonfinite"] == 0 and not got.keep[0, 3:5].any()
    metrics = mismatch_metrics(lp, rlp, policy, got)
    assert all(torch.isfinite(v) for v in metrics.values())


def test_a_sequence_mask_drops_whole_sequences_and_counts_them():
    lp = torch.zeros(3, 4, dtype=torch.float64)
    rlp = lp.clone()
    rlp[1] = -0.5  # sequence ratio exp(2): outside [0.5, 2.0]
    mask = torch.ones(3, 4, dtype=torch.bool)
    for level, modes in (("sequence", {"mask": {"low": 0.5, "high": 2.0}}),
                         ("token", {"geo_mask": {"low": 0.9, "high": 1.1}})):
        got = correct_mismatch(lp, rlp, mask, level=level, modes=modes)
        assert got.keep.tolist() == [[True] * 4, [False] * 4, [True] * 4]
        assert got.counts["masked_seqs"] == 1 and got.counts["masked"] == 4
        assert float(mismatch_metrics(lp, rlp, mask, got)["mismatch/masked_seq_frac"]) == pytest.approx(1 / 3)


def test_no_valid_token_gives_neutral_metrics_and_zero_weights():
    lp, rlp, _ = _inputs(0)
    empty = torch.zeros_like(lp, dtype=torch.bool)
    got = correct_mismatch(lp, rlp, empty, modes={"truncate": {"cap": 2.0}})
    assert got.weights.eq(0).all() and not got.keep.any()
    metrics = {k: float(v) for k, v in mismatch_metrics(lp, rlp, empty, got).items()}
    assert metrics["mismatch/k1"] == metrics["mismatch/k3"] == metrics["mismatch/truncated_frac"] == 0
    assert metrics["mismatch/ess"] == metrics["mismatch/ratio_max"] == metrics["mismatch/ppl_ratio"] == 1


@pytest.mark.parametrize("kwargs,needle", [
    (dict(level="seq"), "level 'seq'"),
    (dict(modes={"icepop": {}}), "icepop"),
    (dict(modes={"truncate": {"cap": 0.0}}), "cap must be in"),
    (dict(modes={"truncate": {"cap": -1.0}}), "cap must be in"),
    (dict(modes={"truncate": {}}), "bad parameters"),
    (dict(modes={"mask": {"low": 2.0, "high": 2.0}}), "low < high"),
    (dict(modes={"mask": {"low": 0.0, "high": 2.0}}), "low < high"),
    (dict(modes={"geo_mask": {"low": 1.1, "high": 0.9}}), "low=1.1"),
    (dict(modes={"mask": {"low": 0.5, "high": 2.0, "cap": 3}}), "bad parameters"),
])
def test_bad_levels_modes_and_parameters_are_refused_by_name(kwargs, needle):
    lp, rlp, mask = _inputs(0)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        correct_mismatch(lp, rlp, mask, **kwargs)


def test_shapes_must_agree():
    lp, rlp, mask = _inputs(0)
    with pytest.raises(ValueError, match="one shape"):
        correct_mismatch(lp, rlp[:, :3], mask)


def test_a_registered_mode_is_usable_by_name_and_names_are_unique():
    @register_correction("keep_first_token")
    def keep_first(ratios, level):
        keep = ratios.valid & (torch.arange(ratios.valid.shape[1]) == 0)
        return ModeResult(None, keep, ratios.valid & ~keep)

    @register_correction("halve")
    def halve(ratios, level):
        return ModeResult(torch.full_like(ratios.diff, 0.5), None, ratios.valid & False)

    try:
        lp, rlp, mask = _inputs(0)
        got = correct_mismatch(lp, rlp, mask, modes={"keep_first_token": {}})
        assert got.keep.sum() == int(mask[:, 0].sum())
        both = correct_mismatch(lp, rlp, mask, modes={"keep_first_token": {}, "halve": {}})
        assert torch.equal(both.weights, 0.5 * got.weights)  # a custom mode's weight applies
        capped = correct_mismatch(lp, rlp, mask, modes={"halve": {}, "truncate": {"cap": 3.0}})
        assert capped.weights.max() > 0.5  # truncate's weight wins over a custom one
        with pytest.raises(ValueError, match="already registered"):
            register_correction("keep_first_token")(keep_first)
    finally:
        CORRECTION_MODES.pop("keep_first_token")
        CORRECTION_MODES.pop("halve")
