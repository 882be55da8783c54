"""Held-out evaluation: pass@k estimator, and scores that are not numbers are never correct."""

from types import SimpleNamespace

import pytest

from steadyrl.run.evaluate import _correct, pass_at_k


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


# --- a metric nothing measured is missing (None), never 0 -----------------------------------------


class _EchoEngine:
    """Answers every prompt with ``answer`` (greedy and sampled alike), as a one-token response."""

    tokenizer = None  # a single-turn evaluation never renders or tokenizes anything itself

    def __init__(self, answer: str):
        self.answer = answer

    def generate(self, ids, n, **kwargs):
        import torch

        from steadyrl.rollout.base import Generation

        rows = len(ids) * n
        ones = torch.ones((rows, 1), dtype=torch.long)
        return Generation(prompt_ids=ones, prompt_mask=ones, response_ids=ones, response_mask=ones,
                          truncated=torch.zeros(rows, dtype=torch.bool), completions=[self.answer] * rows)


def _failing(prompts, completions, **columns):
    raise RuntimeError("the verifier crashed")


def _matches(prompts, completions, answer, **columns):
    return [float(c == a) for c, a in zip(completions, answer)]


def _evaluate(*fns, num_samples=2):
    from steadyrl.config.schema import RolloutConfig
    from steadyrl.rewards import RewardSpec
    from steadyrl.run.evaluate import evaluate
    from steadyrl.data.prompts import PromptItem
    from steadyrl.rewards.scorer import Scorer

    prompts = [PromptItem(text=f"p{i}", ids=[1, 2], columns={"answer": "42"}) for i in range(3)]
    scorer = Scorer([RewardSpec(name=fn.__name__, fn=fn, isolation="inline") for fn in fns])
    config = SimpleNamespace(max_new_tokens=4, accuracy_reward=None, batch_size=8, correct_threshold=1.0,
                             num_samples=num_samples, temperature=1.0)
    try:
        return evaluate(_EchoEngine("41"), scorer, prompts, config, RolloutConfig(max_new_tokens=4))
    finally:
        scorer.close()


def test_when_every_reward_fails_the_metrics_are_missing_not_zero(capsys):
    out = _evaluate(_failing)
    assert out == {"accuracy": None, "reward_mean": None, "num_prompts": 3, "pass@1": None, "pass@2": None}
    assert "failed" in capsys.readouterr().out


def test_wrong_answers_are_zero_not_missing():
    out = _evaluate(_matches)
    assert out == {"accuracy": 0.0, "reward_mean": 0.0, "num_prompts": 3, "pass@1": 0.0, "pass@2": 0.0}


def test_accuracy_is_missing_when_only_the_accuracy_reward_fails():
    out = _evaluate(_failing, _matches, num_samples=0)  # the first reward is the accuracy reward
    assert out["accuracy"] is None and out["reward_mean"] is None  # no sample has every reward's score


def test_the_summary_line_says_n_a_for_a_missing_accuracy():
    from steadyrl.run.report import summary_line

    line = summary_line({"steps": 2, "wall_time_s": 3.0, "output_dir": "runs/x",
                          "eval_before": {"accuracy": None}, "eval_after": {"accuracy": 0.5}})
    assert "held-out accuracy n/a -> 50.0%" in line and "points" not in line


def test_evaluation_shows_its_progress(capsys, monkeypatch):
    monkeypatch.setenv("STEADYRL_NO_PROGRESS", "1")  # lines, as in a log file
    _evaluate(_matches, num_samples=2)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[eval]")]
    assert lines and lines[-1].startswith("[eval] 6/6 (100%)")  # 3 greedy, then 3 prompts sampled


def test_several_sets_are_reported_each_and_over_all_their_prompts(monkeypatch):
    from steadyrl.run import evaluate as ev

    tallies = {  # set a: 1 of 1 right; set b: 1 of 3 right, one prompt outside the accuracy reward's domain
        "a": {"correct": [True], "judged": 1, "scored": 1, "rewards": 1.0, "counts": [2], "judged_samples": 2},
        "b": {"correct": [True, False, False, None], "judged": 3, "scored": 4, "rewards": 2.0,
              "counts": [2, 0, 1, None], "judged_samples": 6},
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
    from steadyrl.run.evaluate import _summary

    out = _summary({"correct": [None, None], "judged": 0, "scored": 2, "rewards": 1.0, "counts": [],
                    "judged_samples": 0}, 0)
    assert out["accuracy"] is None and out["reward_mean"] == 0.5 and out["num_prompts"] == 2


def test_a_prompt_outside_the_accuracy_rewards_domains_is_neither_right_nor_wrong():
    from steadyrl.rewards import RewardSpec, score_batch

    def one(prompts, completions, **kw):
        return [1.0] * len(completions)

    result = score_batch([RewardSpec("m", one, domains=["math"], isolation="inline"),
                          RewardSpec("f", one, domains=["fmt"], isolation="inline")],
                         ["p", "q"], ["a", "b"], {"domain": ["math", "fmt"]}, domain_key="domain")
    assert _correct(result, "m", 1.0) == [True, None]
