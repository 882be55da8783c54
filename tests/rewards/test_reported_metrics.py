"""The small mechanism by which a reward object reports metrics of its own (``metrics()``) and says
where it runs best (``preferred_isolation``); how ranks' reports merge."""

import torch

from steadyrl.rewards import RewardScorer, RewardSpec, reward_metrics
from steadyrl.metrics import Count
from steadyrl.rewards.scoring import ScoreResult
from steadyrl.trainer.global_batch import merge_results


class Reporting:
    def __init__(self, report):
        self.report = report

    def __call__(self, prompts, completions, **columns):
        return [1.0] * len(completions)

    def metrics(self):
        return self.report()


def test_the_scorer_logs_each_reward_s_own_metrics_under_its_name():
    specs = [RewardSpec("a", Reporting(lambda: {"cache_hit_rate": 0.25, "failures/timeout": 2}), isolation="thread"),
             RewardSpec("b", Reporting(lambda: {"x": 1.0}), isolation="inline"),
             RewardSpec("broken", Reporting(lambda: 1 / 0), isolation="inline")]
    with RewardScorer(specs) as scorer:
        result = scorer.score(["p"], ["c"])
    assert result.metrics == {"reward/a/cache_hit_rate": 0.25, "reward/a/failures/timeout": 2.0, "reward/b/x": 1.0}
    assert reward_metrics(result)["reward/a/failures/timeout"] == 2.0


def test_a_process_isolated_reward_reports_the_metrics_of_the_worker_copy_that_scored():
    class Counting:
        def __init__(self):
            self.calls = 0

        def __call__(self, prompts, completions, **kw):
            self.calls += 1
            return [1.0] * len(completions)

        def metrics(self):
            calls, self.calls = self.calls, 0
            return {"calls": float(calls)}

    trainer_copy = Counting()
    with RewardScorer([RewardSpec("p", trainer_copy, isolation="process", chunk_size=1)]) as scorer:
        assert scorer.score(["p", "q"], ["c", "d"]).metrics == {"reward/p/calls": 2.0}
        assert scorer.score(["p"], ["c"]).metrics == {"reward/p/calls": 1.0}
    assert trainer_copy.calls == 0  # the worker's copy scored and reported


def test_a_hostile_workers_metrics_are_filtered_to_short_keys_and_finite_numbers():
    def report():
        return {"ok": 1.0, "bad key!": 2.0, "nan": float("nan"), "x" * 100: 3.0,
                **{f"k{i}": 1.0 for i in range(100)}}

    spec = RewardSpec("p", Reporting(report), isolation="process")
    with RewardScorer([spec]) as scorer:
        metrics = scorer.score(["p"], ["c"]).metrics
    assert metrics["reward/p/ok"] == 1.0
    assert not any(k.endswith(("bad key!", "nan", "x" * 100)) for k in metrics)
    assert len(metrics) <= 64


def test_preferred_isolation_applies_only_when_none_is_set():
    fn = Reporting(dict)
    fn.preferred_isolation = "inline"
    assert RewardSpec("a", fn).isolation == "inline"
    assert RewardSpec("a", fn, isolation="thread").isolation == "thread"
    fn.preferred_isolation = "elsewhere"
    assert RewardSpec("a", fn).isolation is None


def _result(metrics, counts=()):
    return ScoreResult(names=["a"], weights={"a": 1.0}, raw={"a": [1.0]}, scores=torch.ones(1, dtype=torch.float64),
                       valid=torch.ones(1, dtype=torch.bool), failures={"a": {}}, metrics=metrics,
                       metric_counts=set(counts))


def test_ranks_reports_merge_failures_summed_and_rates_averaged():
    def result(metrics):
        return _result(metrics, counts=["reward/a/failures/timeout"])  # declared a count by the reporter

    merged = merge_results([result({"reward/a/cache_hit_rate": 0.5, "reward/a/failures/timeout": 1.0}),
                            result({"reward/a/cache_hit_rate": 0.0, "reward/a/failures/timeout": 2.0})])
    assert merged.metrics == {"reward/a/cache_hit_rate": 0.25, "reward/a/failures/timeout": 3.0}
    assert merged.metric_counts == {"reward/a/failures/timeout"}


def test_the_declared_reduction_decides_the_merge_not_the_metric_s_name():
    merged = merge_results([_result({"reward/a/failures/x": 1.0, "reward/a/calls": 2.0}, counts=["reward/a/calls"]),
                            _result({"reward/a/failures/x": 3.0, "reward/a/calls": 5.0}, counts=["reward/a/calls"])])
    assert merged.metrics == {"reward/a/failures/x": 2.0, "reward/a/calls": 7.0}


def test_a_reward_declares_a_count_by_returning_count_in_any_isolation():
    def report():
        return {"calls": Count(3), "rate": 0.5}

    for isolation in ("inline", "thread", "process"):
        with RewardScorer([RewardSpec("a", Reporting(report), isolation=isolation)]) as scorer:
            result = scorer.score(["p"], ["c"])
        assert result.metrics == {"reward/a/calls": 3.0, "reward/a/rate": 0.5}, isolation
        assert result.metric_counts == {"reward/a/calls"}, isolation
        merged = merge_results([result, result])
        assert merged.metrics == {"reward/a/calls": 6.0, "reward/a/rate": 0.5}, isolation


def test_the_built_in_rewards_report_their_failures_as_counts():
    from steadyrl.rewards.cached import CachedReward

    reward = CachedReward("judge")
    reward.count_failure("timeout", 2)
    out = reward.metrics()
    assert isinstance(out["failures/timeout"], Count) and out["failures/timeout"] == 2.0
