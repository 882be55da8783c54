"""PromptSampler: full batches forever, seeded epochs, exact resume."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyrl.errors import ConfigError, DataError
from steadyrl.data import PromptSampler

RECORDS = [{"prompt": f"p{i}", "i": i} for i in range(10)]


def ids(batch):
    return [r["i"] for r in batch]


def take(sampler, n):
    return [ids(b) for b in itertools.islice(sampler, n)]


def test_every_epoch_is_a_permutation_and_epochs_differ():
    sampler = PromptSampler(RECORDS, 5, seed=0)
    first = sum(take(sampler, 2), [])
    second = ids(sampler.next_batch()) + ids(sampler.next_batch())
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second and first != list(range(10))


def test_same_seed_same_stream_other_seed_other_stream():
    assert take(PromptSampler(RECORDS, 4, seed=7), 6) == take(PromptSampler(RECORDS, 4, seed=7), 6)
    assert take(PromptSampler(RECORDS, 4, seed=7), 6) != take(PromptSampler(RECORDS, 4, seed=8), 6)


def test_batches_are_always_full_and_wrap_into_the_next_epoch():
    sampler = PromptSampler(RECORDS, 4, seed=1)
    batches = take(sampler, 5)  # 20 records = 2 epochs
    assert all(len(b) == 4 for b in batches)
    stream = sum(batches, [])
    assert sorted(stream[:10]) == sorted(stream[10:]) == list(range(10))
    assert sampler.epoch == 2.0


def test_epoch_is_the_fraction_of_the_data_drawn():
    sampler = PromptSampler(RECORDS, 4, seed=1)
    assert sampler.epoch == 0.0
    next(sampler)
    assert sampler.epoch == pytest.approx(0.4)
    next(sampler), next(sampler)
    assert sampler.epoch == pytest.approx(1.2)


def test_a_batch_larger_than_the_data_spans_epochs():
    sampler = PromptSampler(RECORDS[:3], 7, seed=2)
    batch = ids(next(sampler))
    assert len(batch) == 7
    assert sorted(batch[:3]) == sorted(batch[3:6]) == [0, 1, 2]
    assert sampler.epoch == pytest.approx(7 / 3)


def test_no_shuffle_walks_the_data_in_order():
    assert take(PromptSampler(RECORDS, 4, seed=0, shuffle=False), 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]


def test_resume_draws_the_same_next_batches():
    run = PromptSampler(RECORDS, 3, seed=5)
    take(run, 4)  # mid-epoch 2
    state = run.state_dict()
    expected = take(run, 6)
    resumed = PromptSampler(RECORDS, 3, seed=5)
    resumed.load_state_dict(state)
    assert take(resumed, 6) == expected
    assert resumed.epoch == run.epoch == 3.0


@given(
    n=st.integers(1, 12),
    batch_size=st.integers(1, 15),
    seed=st.integers(0, 2**32),
    before=st.integers(0, 6),
)
def test_resume_matches_an_uninterrupted_run(n, batch_size, seed, before):
    records = RECORDS[:n] if n <= 10 else [{"i": i} for i in range(n)]
    straight = PromptSampler(records, batch_size, seed=seed)
    stream = take(straight, before + 4)
    interrupted = PromptSampler(records, batch_size, seed=seed)
    take(interrupted, before)
    resumed = PromptSampler(records, batch_size, seed=seed)
    resumed.load_state_dict(interrupted.state_dict())
    assert take(resumed, 4) == stream[before:]
    flat = sum(stream, [])
    for e in range(len(flat) // n):
        assert sorted(flat[e * n : (e + 1) * n]) == list(range(n))


def test_resume_refuses_a_different_stream():
    state = PromptSampler(RECORDS, 3, seed=5).state_dict()
    with pytest.raises(DataError, match="ran over 10 records, this run has 9"):
        PromptSampler(RECORDS[:9], 3, seed=5).load_state_dict(state)
    with pytest.raises(ConfigError, match="seed=6 differs from the checkpoint's seed=5"):
        PromptSampler(RECORDS, 3, seed=6).load_state_dict(state)
    PromptSampler(RECORDS, 8, seed=5).load_state_dict(state)  # another batch size is fine


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_size": 0, "seed": 0}, "batch_size=0"),
    ({"batch_size": 2, "seed": -1}, "seed=-1"),
])
def test_bad_arguments_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        PromptSampler(RECORDS, **kwargs)
    with pytest.raises(DataError, match="at least one record"):
        PromptSampler([], 2, seed=0)
