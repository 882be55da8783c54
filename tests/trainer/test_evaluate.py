"""Held-out evaluation: pass@k estimator, and scores that are not numbers are never correct."""

from types import SimpleNamespace

import pytest

from steadyrl.trainer.evaluate import _correct, pass_at_k


@pytest.mark.parametrize("n,c,k,expected", [(4, 0, 1, 0.0), (4, 4, 2, 1.0), (4, 1, 1, 0.25), (4, 1, 2, 0.5),
                                             (5, 2, 3, 1 - 1 / 10)])
def test_pass_at_k_is_the_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)


def test_nan_inf_and_missing_scores_are_not_correct():
    result = SimpleNamespace(raw={"r": [1.0, float("inf"), float("nan"), None, 0.5]})
    assert _correct(result, "r", 1.0) == [True, False, False, False, False]


def test_several_sets_are_reported_each_and_over_all_their_prompts(monkeypatch):
    from steadyrl.trainer import evaluate as ev

    tallies = {  # set a: 1 of 1 right; set b: 1 of 3 right, one prompt outside the accuracy reward's domain
        "a": {"correct": [True], "scored": 1, "rewards": 1.0, "counts": [2]},
        "b": {"correct": [True, False, False, None], "scored": 4, "rewards": 2.0, "counts": [2, 0, 1, None]},
    }
    monkeypatch.setattr(ev, "_tally", lambda engine, scorer, prompts, *a: tallies[prompts[0]])
    config = SimpleNamespace(num_samples=2)
    out = ev.evaluate_sets(None, None, {"a": ["a"], "b": ["b"], "empty": []}, config, None)
    assert out["a/accuracy"] == 1.0 and out["b/accuracy"] == round(1 / 3, 6)
    assert out["accuracy"] == 0.5  # 2 right of 4 judged prompts, not the mean of the sets' accuracies
    assert out["num_prompts"] == 5 and out["b/num_prompts"] == 4
    assert out["reward_mean"] == round(3.0 / 5, 6)
    assert out["pass@1"] == round((1.0 + 1.0 + 0.0 + 0.5) / 4, 6)
    assert not any(k.startswith("empty/") for k in out)


def test_a_set_the_accuracy_reward_never_applies_to_has_no_accuracy():
    from steadyrl.trainer.evaluate import _summary

    out = _summary({"correct": [None, None], "scored": 2, "rewards": 1.0, "counts": []}, 0)
    assert "accuracy" not in out and out["reward_mean"] == 0.5 and out["num_prompts"] == 2


def test_a_prompt_outside_the_accuracy_rewards_domains_is_neither_right_nor_wrong():
    from steadyrl.rewards import RewardSpec, score_batch

    def one(prompts, completions, **kw):
        return [1.0] * len(completions)

    result = score_batch([RewardSpec("m", one, domains=["math"], isolation="inline"),
                          RewardSpec("f", one, domains=["fmt"], isolation="inline")],
                         ["p", "q"], ["a", "b"], {"domain": ["math", "fmt"]}, domain_key="domain")
    assert _correct(result, "m", 1.0) == [True, None]
