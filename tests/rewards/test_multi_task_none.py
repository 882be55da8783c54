"""TRL's multi-task idiom (issue 33, item 3): a reward function of your own that returns None where
it does not apply, beside others that score the sample; the sample is invalid only when no function
scored it. A built-in's None (it could not score) still fails the sample."""

from steadyrl.rewards import RewardSpec, load_reward, reward_metrics, score_batch

PROMPTS = ["2+2?", "say hi", "3+3?", "???"]
COMPLETIONS = ["4", "hi", "7", "?"]
TASKS = {"task": ["math", "chat", "math", "other"]}


def math_only(prompts, completions, task, **kwargs):
    return [float(c == str(eval(p[:-1]))) if t == "math" else None for p, c, t in zip(prompts, completions, task)]


def chat_only(prompts, completions, task, **kwargs):
    return [0.5 if t == "chat" else None for t in task]


def test_none_where_a_function_does_not_apply_leaves_the_sample_to_the_others():
    result = score_batch([RewardSpec("math_only", math_only), RewardSpec("chat_only", chat_only, weight=2.0)],
                         PROMPTS, COMPLETIONS, TASKS, isolation="inline")
    assert result.valid.tolist() == [True, True, True, False]  # the last row: no function scored it
    assert result.scores.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert result.applies("math_only") == [True, False, True, True]
    assert result.applies("chat_only") == [False, True, False, True]
    # not applying is not a failure; a row nobody scored counts one "none" for each
    assert result.failures["math_only"]["none"] == 1 and result.failures["chat_only"]["none"] == 1
    metrics = reward_metrics(result)
    assert metrics["reward/math_only/mean"] == 0.5 and metrics["reward/chat_only/mean"] == 0.5
    picked = result.select([1, 0])
    assert picked.applies("math_only") == [False, True] and picked.failures["math_only"]["none"] == 0


def test_a_builtins_none_still_fails_the_sample():
    # math returns None when the gold answer cannot be parsed: it could not score, so the sample fails
    specs = [RewardSpec("math", load_reward("math")), RewardSpec("other", lambda p, c, **k: [1.0] * len(c))]
    result = score_batch(specs, ["q"], ["\\boxed{4}"], {"answer": [None]}, isolation="inline")
    assert result.raw["math"] == [None] and result.valid.tolist() == [False]
    assert result.failures["math"]["none"] == 1


def test_a_single_function_returning_none_still_invalidates_as_before():
    result = score_batch([RewardSpec("math_only", math_only)], PROMPTS, COMPLETIONS, TASKS, isolation="inline")
    assert result.valid.tolist() == [True, False, True, False]
    assert result.failures["math_only"]["none"] == 2
