"""Reward domains: a reward restricted to some domains is called on their rows and no other;
its other rows are "not applicable" (None), never failures; per-domain metrics."""

import math

import pytest

from steadyrl.errors import ConfigError
from steadyrl.rewards import RewardScorer, RewardSpec, reward_metrics, score_batch
from steadyrl.trainer.global_batch import merge_results

DOMAINS = ["math", "code", "math", "chat", "code"]
PROMPTS = [f"p{i}" for i in range(5)]
COMPLETIONS = ["a", "bb", "ccc", "dddd", "eeeee"]
SEEN: dict[str, list] = {}


def recorder(tag, value):
    """A reward that records every prompt and column value it was called with."""
    def fn(prompts, completions, **columns):
        SEEN.setdefault(tag, []).append({"prompts": list(prompts), "domain": list(columns["domain"]),
                                         "answer": list(columns["answer"])})
        return [value] * len(completions)
    return fn


def spec(name, value, domains, weight=1.0, fn=None):
    """Called on whole batches (chunk_size None), so a call shows every row routed to it."""
    return RewardSpec(name, fn or recorder(name, value), weight=weight, isolation="inline", domains=domains,
                      chunk_size=None)


def columns(domains=DOMAINS):
    return {"domain": list(domains), "answer": [f"ans{i}" for i in range(len(domains))]}


@pytest.fixture(autouse=True)
def _clear():
    SEEN.clear()


def test_a_reward_is_only_called_on_its_domains_rows():
    specs = [spec("m", 1.0, ["math"]), spec("c", 2.0, ["code"]), spec("all", 10.0, None)]
    score_batch(specs, PROMPTS, COMPLETIONS, columns(), isolation="inline", domain_key="domain")
    assert SEEN["m"] == [{"prompts": ["p0", "p2"], "domain": ["math", "math"], "answer": ["ans0", "ans2"]}]
    assert SEEN["c"] == [{"prompts": ["p1", "p4"], "domain": ["code", "code"], "answer": ["ans1", "ans4"]}]
    assert SEEN["all"][0]["prompts"] == PROMPTS


def test_routed_rows_under_process_isolation_see_only_their_rows():
    def length(prompts, completions, **kw):
        return [float(len(c)) for c in completions]

    specs = [RewardSpec("len", length, domains=["code"], isolation="process")]
    with RewardScorer(specs, domain_key="domain") as scorer:
        result = scorer.score(PROMPTS, COMPLETIONS, columns())
    assert result.raw["len"] == [None, 2.0, None, None, 5.0]


def test_score_is_the_weighted_sum_over_the_rows_own_domain_rewards_only():
    specs = [spec("m", 1.0, ["math"], weight=2.0), spec("c", 3.0, ["code", "chat"], weight=0.5)]
    with RewardScorer(specs, domain_key="domain") as scorer:
        result = scorer.score(PROMPTS, COMPLETIONS, columns())
    assert result.scores.tolist() == [2.0, 1.5, 2.0, 1.5, 1.5]
    assert result.valid.all()
    assert result.raw["m"] == [1.0, None, 1.0, None, None]
    assert result.applies("m") == [True, False, True, False, False]
    assert result.failures["m"] == {"exception": 0, "timeout": 0, "none": 0, "nonfinite": 0}
    assert result.failure_kinds("m") == [None] * 5


def test_a_row_whose_domain_has_no_reward_is_invalid_and_counted():
    specs = [spec("m", 1.0, ["math"]), spec("c", 1.0, ["code"])]
    with RewardScorer(specs, domain_key="domain") as scorer:
        result = scorer.score(PROMPTS, COMPLETIONS, columns())
    assert result.valid.tolist() == [True, True, True, False, True]
    assert result.unrouted() == [False, False, False, True, False]
    metrics = reward_metrics(result)
    assert metrics["reward/unrouted"] == 1.0
    assert metrics["reward/m/failed"] == 0.0 and metrics["reward/c/failed"] == 0.0


def test_a_failure_counts_only_the_functions_own_rows():
    def boom(prompts, completions, **kw):
        raise RuntimeError("broken code reward")

    specs = [spec("m", 1.0, ["math"]), RewardSpec("c", boom, isolation="inline", domains=["code"])]
    with RewardScorer(specs, domain_key="domain") as scorer:
        result = scorer.score(PROMPTS, COMPLETIONS, columns(["math", "code", "math", "math", "code"]))
    assert result.failures["c"]["exception"] == 2
    assert result.failure_kinds("c") == [None, "exception", None, None, "exception"]
    assert result.valid.tolist() == [True, False, True, True, False]  # math rows are unaffected
    picked = result.select([1, 2])
    assert picked.failures["c"]["exception"] == 1 and picked.domains == ["code", "math"]


def test_a_function_with_no_row_in_the_batch_is_not_called():
    specs = [spec("m", 1.0, ["math"]), spec("c", 1.0, ["code"])]
    with RewardScorer(specs, domain_key="domain") as scorer:
        result = scorer.score(PROMPTS[:2], COMPLETIONS[:2], columns(["math", "math"]))
    assert "c" not in SEEN
    assert result.raw["c"] == [None, None] and result.valid.all()


def test_per_domain_metrics():
    def by_len(prompts, completions, **kw):
        return [float(len(c)) if len(c) != 3 else None for c in completions]

    specs = [RewardSpec("len", by_len, isolation="inline", domains=["math"]), spec("c", 0.5, ["code"])]
    with RewardScorer(specs, domain_key="domain") as scorer:
        result = scorer.score(PROMPTS, COMPLETIONS, columns())
    m = reward_metrics(result)
    assert m["reward/domain/math/mean"] == 1.0  # row 2 (len 3) is None: invalid
    assert m["reward/domain/math/valid_frac"] == 0.5 and m["reward/domain/math/count"] == 2.0
    assert m["reward/domain/code/mean"] == 0.5 and m["reward/domain/code/valid_frac"] == 1.0
    assert "reward/domain/chat/mean" not in m and m["reward/domain/chat/valid_frac"] == 0.0
    assert m["reward/len/failed"] == 1.0
    assert math.isclose(m["reward/mean"], (1.0 + 0.5 + 0.5) / 3)
    assert m["reward/valid_frac"] == 3 / 5


def test_merged_ranks_keep_their_domains():
    specs = [spec("m", 1.0, ["math"]), spec("c", 2.0, ["code"])]
    with RewardScorer(specs, domain_key="domain") as scorer:
        a = scorer.score(PROMPTS[:2], COMPLETIONS[:2], columns(DOMAINS[:2]))
        b = scorer.score(PROMPTS[2:], COMPLETIONS[2:], columns(DOMAINS[2:]))
    merged = merge_results([a, b])
    assert merged.domains == DOMAINS
    assert merged.unrouted() == [False, False, False, True, False]


def test_without_domain_key_every_reward_sees_every_row():
    result = score_batch([spec("all", 1.0, None)], PROMPTS, COMPLETIONS, columns(), isolation="inline")
    assert result.domains is None and "reward/unrouted" not in reward_metrics(result)
    assert SEEN["all"][0]["prompts"] == PROMPTS


def test_restricted_reward_without_domain_key_is_a_config_error():
    with pytest.raises(ConfigError, match="domain_key"):
        RewardScorer([spec("m", 1.0, ["math"])])


@pytest.mark.parametrize("bad", ["math", [], [""], [3]])
def test_bad_domains_are_config_errors(bad):
    with pytest.raises(ConfigError, match="domains"):
        spec("m", 1.0, bad)
