"""MixtureSampler: weighted proportions, determinism, each source's epochs, exact resume."""

import pytest

from steadyrl.data import MixtureSampler
from steadyrl.errors import ConfigError, DataError

A = [f"a{i}" for i in range(7)]
B = [f"b{i}" for i in range(50)]
C = [f"c{i}" for i in range(3)]


def source_of(item):
    return item[0]


def test_proportions_follow_the_weights_over_many_draws():
    sampler = MixtureSampler([A, B, C], [1.0, 3.0, 4.0], 16, seed=0, names=["a", "b", "c"])
    drawn = [x for _ in range(1000) for x in sampler.next_batch()]  # 16000 prompts
    share = {s: sum(source_of(x) == s for x in drawn) / len(drawn) for s in "abc"}
    # binomial std at p=0.5, n=16000 is 0.004: 0.015 is over 3.5 std
    assert share["a"] == pytest.approx(1 / 8, abs=0.015)
    assert share["b"] == pytest.approx(3 / 8, abs=0.015)
    assert share["c"] == pytest.approx(4 / 8, abs=0.015)


def test_each_source_walks_its_own_epochs_without_repeats():
    sampler = MixtureSampler([A, B], [1.0, 1.0], 4, seed=3)
    drawn = [x for _ in range(200) for x in sampler.next_batch()]
    from_a = [x for x in drawn if source_of(x) == "a"]
    for start in range(0, len(from_a) - len(A) + 1, len(A)):  # every epoch of A holds each record once
        assert sorted(from_a[start : start + len(A)]) == sorted(A)
    assert sampler.source_epochs()["0"] == pytest.approx(len(from_a) / len(A))


def test_same_seed_same_stream_other_seed_other_stream():
    draw = lambda seed: [MixtureSampler([A, B], [1, 2], 8, seed=seed).next_batch() for _ in range(5)]
    assert draw(1) == draw(1)
    assert draw(1) != draw(2)


def test_state_round_trip_mid_epoch_resumes_exactly():
    full = MixtureSampler([A, B, C], [2.0, 1.0, 1.0], 5, seed=11)
    expected = [full.next_batch() for _ in range(900)]  # crosses a 4096-choice block
    first = MixtureSampler([A, B, C], [2.0, 1.0, 1.0], 5, seed=11)
    for _ in range(437):
        first.next_batch()
    state = first.state_dict()
    resumed = MixtureSampler([A, B, C], [2.0, 1.0, 1.0], 5, seed=11)
    resumed.load_state_dict(state)
    assert [resumed.next_batch() for _ in range(463)] == expected[437:]
    assert resumed.epoch == full.epoch


def test_resume_refuses_other_weights_sources_or_seed():
    state = MixtureSampler([A, B], [1, 1], 4, seed=0, names=["a", "b"]).state_dict()
    with pytest.raises(ConfigError, match="weights"):
        MixtureSampler([A, B], [1, 2], 4, seed=0, names=["a", "b"]).load_state_dict(state)
    with pytest.raises(ConfigError, match="same sources"):
        MixtureSampler([A, B], [1, 1], 4, seed=0, names=["a", "c"]).load_state_dict(state)
    with pytest.raises(ConfigError, match="seed"):
        MixtureSampler([A, B], [1, 1], 4, seed=1, names=["a", "b"]).load_state_dict(state)
    with pytest.raises(ConfigError, match="train_path"):
        MixtureSampler([A, B], [1, 1], 4, seed=0).load_state_dict({"drawn": 3, "seed": 0})


@pytest.mark.parametrize("weight", [0, -1.0, float("nan"), float("inf"), True])
def test_a_weight_that_is_not_positive_is_refused(weight):
    with pytest.raises(ConfigError, match="weight"):
        MixtureSampler([A, B], [1.0, weight], 4, seed=0)


def test_an_empty_source_is_refused():
    with pytest.raises(DataError, match="'b'"):
        MixtureSampler([A, []], [1, 1], 4, seed=0, names=["a", "b"])
