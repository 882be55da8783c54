"""The small mechanism by which a reward object reports metrics of its own (``metrics()``) and says
where it runs best (``preferred_isolation``); how ranks' reports merge."""

import torch

from steadyrl.rewards import RewardScorer, RewardSpec, reward_metrics
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


def test_a_process_isolated_reward_is_not_asked_for_metrics():
    asked = []
    spec = RewardSpec("p", Reporting(lambda: asked.append(1) or {"x": 1.0}), isolation="process")
    with RewardScorer([spec]) as scorer:
        assert scorer.score(["p"], ["c"]).metrics == {}
    assert asked == []


def test_preferred_isolation_applies_only_when_none_is_set():
    fn = Reporting(dict)
    fn.preferred_isolation = "inline"
    assert RewardSpec("a", fn).isolation == "inline"
    assert RewardSpec("a", fn, isolation="thread").isolation == "thread"
    fn.preferred_isolation = "elsewhere"
    assert RewardSpec("a", fn).isolation is None


def test_ranks_reports_merge_failures_summed_and_rates_averaged():
    def result(metrics):
        return ScoreResult(names=["a"], weights={"a": 1.0}, raw={"a": [1.0]}, scores=torch.ones(1, dtype=torch.float64),
                           valid=torch.ones(1, dtype=torch.bool), failures={"a": {}}, metrics=metrics)

    merged = merge_results([result({"reward/a/cache_hit_rate": 0.5, "reward/a/failures/timeout": 1.0}),
                            result({"reward/a/cache_hit_rate": 0.0, "reward/a/failures/timeout": 2.0})])
    assert merged.metrics == {"reward/a/cache_hit_rate": 0.25, "reward/a/failures/timeout": 3.0}
