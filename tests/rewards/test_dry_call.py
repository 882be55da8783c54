"""The dry call before step 1 (issue 33, item 2): TRL's ``def f(prompts, completions, answer,
**kwargs)`` reading ``c[0]["content"]`` is called TRL's way on chat data; one that fails on text
and on message lists stops the run before step 1 naming itself and its exception; text data and
functions that work are not touched."""

import pytest

from steadyrl.data.prompts import PromptItem
from steadyrl.errors import RewardCallError
from steadyrl.rewards import RewardSpec
from steadyrl.rewards.scorer import Scorer, dry_call

TRL_SOURCE = '''
def correct(prompts, completions, answer, **kwargs):
    """TRL's conversational idiom, prompts and completions first."""
    assert prompts[0][-1]["role"] == "user"
    return [float(c[0]["content"] == a) for c, a in zip(completions, answer)]


def works(prompts, completions, **kwargs):
    return [0.0] * len(completions)


def broken(prompts, completions, **kwargs):
    return [float(c["content"] == "4") for c in completions]


def picky(prompts, completions, **kwargs):
    return [float(len(c.split()[1])) for c in completions]
'''

CHAT_ROW = {"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}


def _spec(tmp_path, name, **kw):
    path = tmp_path / "trl_rewards.py"
    path.write_text(TRL_SOURCE)
    return RewardSpec.load(f"{path}:{name}", isolation="process", **kw)


def test_a_trl_function_that_fails_on_text_is_called_trls_way_on_chat_data(tmp_path):
    said = []
    scorer = Scorer([_spec(tmp_path, "correct")], probe=CHAT_ROW, say=said.append)
    items = [PromptItem(text="<user>2+2?", ids=[1], columns={"answer": "4"}, messages=CHAT_ROW["prompt"])] * 2
    try:
        result = scorer(items, ["4", "5"])
    finally:
        scorer.close()
    assert result.raw["correct"] == [1.0, 0.0] and result.failures["correct"]["exception"] == 0
    assert len(said) == 1 and "'correct' fails on text but runs on chat messages" in said[0]


def test_a_function_failing_on_text_and_on_messages_stops_the_run_naming_it_and_its_exception(tmp_path):
    with pytest.raises(RewardCallError) as err:
        dry_call([_spec(tmp_path, "broken")], CHAT_ROW, say=print)
    first = str(err.value).splitlines()[0]
    assert "'broken' raised TypeError: string indices must be integers" in first
    assert "dry call before step 1" in first and "called as broken(prompts, completions, answer=...)" in first
    assert "raised TypeError: list indices must be integers or slices, not str when called TRL's way" in first


def test_text_data_is_not_dry_called(tmp_path):
    spec = _spec(tmp_path, "broken")
    assert dry_call([spec], {"prompt": "2+2?", "answer": "4"}, say=print) == [spec]


def test_another_exception_on_the_placeholder_is_a_warning_not_a_stop(tmp_path):
    said = []
    specs = dry_call([_spec(tmp_path, "picky")], CHAT_ROW, say=said.append)
    assert [s.name for s in specs] == ["picky"]
    assert len(said) == 1 and said[0].startswith("warning: rewards: 'picky' raised IndexError")


def test_builtins_and_working_functions_pass_unchanged(tmp_path):
    from steadyrl.rewards.loader import load_reward

    specs = [RewardSpec("math", load_reward("math")), _spec(tmp_path, "works")]
    said = []
    assert dry_call(specs, CHAT_ROW, say=said.append) == specs and said == []
