"""Reward functions written for TRL's GRPOTrainer work unchanged, next to steadyrl-style ones.

The functions below follow the styles of TRL's documentation: everything by keyword,
``completions`` first or alone, dataset columns by name, ``completion_ids``, and in
conversational data a completion as ``[{"role": "assistant", "content": ...}]``. They are scored
through the real scorer in worker processes (``isolation="process"``), where a call made the
old way - ``fn(prompts, completions, **columns)`` - failed or fed them the wrong arguments.
"""

import re

import pytest

from steadyrl.errors import RewardCallError
from steadyrl.rewards import RewardSpec, load_reward, score_batch
from steadyrl.rewards.calling import plan_call


# --- TRL style, standard format -------------------------------------------------------------------
def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]


def reward_boxed(completions, ground_truth, **kwargs):
    matches = [re.search(r"\\boxed\{(.*?)\}", completion) for completion in completions]
    contents = [match.group(1) if match else "" for match in matches]
    return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth)]


def reward_token_count(completion_ids, **kwargs):
    return [float(len(ids)) for ids in completion_ids]


def reward_first_token(completions, completion_ids, **kwargs):
    return [float(ids[0]) for ids in completion_ids]


def reward_multi_task(prompts, completions, task, **kwargs):
    """prompts and completions first and second: called positionally, which gives it the same."""
    return [float(len(c)) if t == "length" else 0.0 for c, t in zip(completions, task)]


def reward_strict(completions, ground_truth):
    """No **kwargs: only what it names may be passed."""
    return [float(gt in c) for c, gt in zip(completions, ground_truth)]


# --- TRL style, conversational format ---------------------------------------------------------------
def format_reward(completions, **kwargs):
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]


def accuracy_reward(completions, solution, **kwargs):
    contents = [completion[0]["content"] for completion in completions]
    return [float(sol in content) for content, sol in zip(contents, solution)]


def last_user_turn_length(completions, **kwargs):
    """Reads the conversational prompts from kwargs, as TRL hands them over."""
    return [float(len(prompt[-1]["content"])) for prompt in kwargs["prompts"]]


# --- steadyrl style, and what steadyrl always called positionally ----------------------------------
def steadyrl_style(prompts, completions, **columns):
    return [float(isinstance(p, str) and isinstance(c, str)) for p, c in zip(prompts, completions)]


def legacy_names(p, c, **kw):
    return [float(len(x)) for x in c]


PROMPTS = ["Solve 1+1", "Solve 1+1", "Name a color", "Name a color"]
COMPLETIONS = ["\\boxed{2}", "it is \\boxed{3}", "<think>hm</think><answer>red</answer>", "blue"]
IDS = [[5, 6, 2], [7, 2], [8, 9, 10, 2], [11]]
COLUMNS = {"ground_truth": ["2", "2", "red", "red"], "task": ["math", "math", "length", "length"]}


def _score(fns, prompts=PROMPTS, completions=COMPLETIONS, columns=COLUMNS, **kwargs):
    specs = [RewardSpec(fn.__name__, fn) for fn in fns]
    return score_batch(specs, prompts, completions, columns, isolation="process", completion_ids=IDS, **kwargs)


def test_the_call_style_is_read_from_the_signature():
    assert plan_call(steadyrl_style).style == "positional"
    assert plan_call(legacy_names).style == "positional"
    assert plan_call(reward_multi_task).style == "positional"
    for fn in (reward_len, reward_boxed, reward_token_count, reward_first_token, reward_strict, format_reward):
        assert plan_call(fn).style == "keyword", fn.__name__
    assert plan_call(reward_boxed).columns == ("ground_truth",)
    assert plan_call(reward_multi_task).columns == ("task",)
    assert not plan_call(steadyrl_style).takes_ids and plan_call(reward_len).takes_ids


def test_trl_style_functions_in_the_standard_format_score_in_worker_processes():
    result = _score([reward_len, reward_boxed, reward_token_count, reward_first_token, reward_multi_task,
                     reward_strict, steadyrl_style, legacy_names])
    assert all(result.failed(name) == 0 for name in result.names), result.errors
    assert result.raw["reward_len"] == [-abs(20 - len(c)) for c in COMPLETIONS]
    assert result.raw["reward_boxed"] == [1.0, 0.0, 0.0, 0.0]
    assert result.raw["reward_token_count"] == [3.0, 2.0, 4.0, 1.0]
    assert result.raw["reward_first_token"] == [5.0, 7.0, 8.0, 11.0]
    assert result.raw["reward_multi_task"] == [0.0, 0.0, float(len(COMPLETIONS[2])), 4.0]
    assert result.raw["reward_strict"] == [1.0, 0.0, 1.0, 0.0]
    assert result.raw["steadyrl_style"] == [1.0] * 4
    assert result.raw["legacy_names"] == [float(len(c)) for c in COMPLETIONS]


CHAT = [[{"role": "system", "content": "Think first."}, {"role": "user", "content": "Name a color"}]] * 4


def test_trl_style_functions_in_the_conversational_format_get_messages_steadyrl_style_ones_text():
    rendered = ["<system>Think first.<user>Name a color<assistant>"] * 4
    columns = {"solution": ["red", "red", "red", "blue"]}
    result = _score([format_reward, accuracy_reward, last_user_turn_length, steadyrl_style],
                    prompts=rendered, columns=columns, chat_prompts=CHAT)
    assert all(result.failed(name) == 0 for name in result.names), result.errors
    assert result.raw["format_reward"] == [0.0, 0.0, 1.0, 0.0]
    assert result.raw["accuracy_reward"] == [0.0, 0.0, 1.0, 1.0]
    assert result.raw["last_user_turn_length"] == [float(len("Name a color"))] * 4
    assert result.raw["steadyrl_style"] == [1.0] * 4  # text prompts and completions, as always


def test_a_sample_with_a_text_prompt_stays_text_in_a_mixed_batch():
    def kinds(completions, prompts, **kwargs):
        return [float(isinstance(p, list)) + 2 * float(isinstance(c, list)) for p, c in zip(prompts, completions)]

    result = score_batch([RewardSpec("kinds", kinds)], ["a", "b"], ["x", "y"], isolation="inline",
                         chat_prompts=[CHAT[0], None])
    assert result.raw["kinds"] == [3.0, 0.0]


def test_the_old_positional_call_broke_each_trl_style():
    """What a positional call did to them: a TypeError, or prompts taken for completions."""
    with pytest.raises(TypeError, match="multiple values for argument 'ground_truth'"):
        reward_boxed(PROMPTS, COMPLETIONS, **COLUMNS)
    with pytest.raises(TypeError):
        reward_len(PROMPTS, COMPLETIONS, **COLUMNS)

    def completion_lengths(completions, completion_ids, **kwargs):
        return [float(len(c)) for c in completions]

    # silently scored the prompts; through the scorer it scores the completions
    assert completion_lengths(PROMPTS, COMPLETIONS) == [float(len(p)) for p in PROMPTS]
    assert _score([completion_lengths]).raw["completion_lengths"] == [float(len(c)) for c in COMPLETIONS]


def test_trl_style_functions_load_from_a_file_with_their_columns_checked(tmp_path):
    path = tmp_path / "trl_rewards.py"
    path.write_text("def reward_len(completions, **kwargs):\n    return [-abs(20 - len(c)) for c in completions]\n\n"
                    "def accuracy(completions, solution, **kwargs):\n"
                    "    return [float(s in c) for c, s in zip(completions, solution)]\n\n"
                    "def by_ids(completions, completion_ids, **kwargs):\n    return [float(len(i)) for i in completion_ids]\n")
    assert load_reward(f"{path}:reward_len").reads_columns == ()
    assert load_reward(f"{path}:accuracy").reads_columns == ("solution",)
    assert load_reward(f"{path}:by_ids").reads_columns == ()
    spec = RewardSpec.load(f"{path}:by_ids")
    result = score_batch([spec], PROMPTS, COMPLETIONS, isolation="process", completion_ids=IDS)
    assert result.raw["by_ids"] == [3.0, 2.0, 4.0, 1.0]


def test_a_call_the_signature_cannot_take_is_told_apart_from_a_type_error_in_the_body():
    def needs_solution(completions, solution, **kwargs):
        return [1.0] * len(completions)

    def body_type_error(completions, **kwargs):
        return [len(c) + "1" for c in completions]

    result = _score([needs_solution, body_type_error])
    assert result.failed("needs_solution") == 4 and result.failed("body_type_error") == 4
    assert list(result.call_errors) == ["needs_solution"]
    text = result.call_errors["needs_solution"]
    assert text.startswith("needs_solution(prompts=..., completions=..., completion_ids=..., ground_truth=..., task=...)")
    assert "missing a required argument: 'solution'" in text


def test_the_trainer_scorer_stops_on_a_first_batch_the_function_cannot_be_called_with():
    from steadyrl.data.prompts import PromptItem
    from steadyrl.rewards.scorer import Scorer

    def needs_solution(completions, solution, **kwargs):
        return [1.0] * len(completions)

    items = [PromptItem(text="q", ids=[1], columns={"answer": "a"})] * 2
    scorer = Scorer([RewardSpec("needs_solution", needs_solution, isolation="process")])
    try:
        with pytest.raises(RewardCallError, match=r"'needs_solution' cannot be called as needs_solution\(.*"
                                                  r"missing a required argument: 'solution'.*columns passed: \['answer'\]"):
            scorer(items, ["x", "y"], [[1], [2]])
    finally:
        scorer.close()


def test_the_trainer_scorer_passes_chat_prompts_and_token_ids():
    from steadyrl.data.prompts import PromptItem
    from steadyrl.rewards.scorer import Scorer

    items = [PromptItem(text="rendered", ids=[1], columns={"solution": "red"}, messages=CHAT[0]),
             PromptItem(text="rendered", ids=[1], columns={"solution": "blue"}, messages=CHAT[0])]
    specs = [RewardSpec("accuracy_reward", accuracy_reward, isolation="process"),
             RewardSpec("reward_token_count", reward_token_count, isolation="process")]
    scorer = Scorer(specs)
    try:
        result = scorer(items, ["red!", "no"], [[4, 2], [2]])
    finally:
        scorer.close()
    assert result.raw["accuracy_reward"] == [1.0, 0.0]
    assert result.raw["reward_token_count"] == [2.0, 1.0]


def test_a_steadyrl_style_function_gets_completion_ids_only_when_it_names_them():
    def named(prompts, completions, completion_ids, **columns):
        return [float(len(ids)) for ids in completion_ids]

    def unnamed(prompts, completions, **columns):
        return [float("completion_ids" in columns)] * len(completions)

    result = _score([named, unnamed])
    assert result.raw["named"] == [3.0, 2.0, 4.0, 1.0]
    assert result.raw["unnamed"] == [0.0] * 4  # its **columns hold the data's columns, as before


# --- issue 24: TRL's (prompts, completions, **kwargs) on chat data; keywords steadyrl does not pass ---
def trl_positional_on_chat(prompts, completions, **kwargs):
    """TRL's own style, but positional-looking: steadyrl calls it its way (text)."""
    return [float(completion[0]["content"] == "red") for completion in completions]


def test_a_positional_function_failing_on_chat_text_is_told_each_arguments_shape_and_the_fix():
    rendered = ["<system>Think first.<user>Name a color<assistant>"] * 4
    result = _score([trl_positional_on_chat], prompts=rendered, columns={}, chat_prompts=CHAT)
    assert result.failed("trl_positional_on_chat") == 4
    text = result.errors["trl_positional_on_chat"]
    assert "string indices must be integers" in text
    assert "completions[i] the decoded completion as text" in text and "message lists" in text
    assert "def f(*, prompts, completions, **kwargs)" in text


def keyword_only_trl(*, prompts, completions, **kwargs):
    return [float(c[0]["content"] == "red" and p[-1]["role"] == "user") for p, c in zip(prompts, completions)]


def test_keyword_only_prompts_and_completions_get_trls_message_lists():
    rendered = ["<system>Think first.<user>Name a color<assistant>"] * 4
    result = _score([keyword_only_trl], prompts=rendered, completions=["red", "blue", "red", "x"], columns={},
                    chat_prompts=CHAT)
    assert result.failed("keyword_only_trl") == 0, result.errors
    assert result.raw["keyword_only_trl"] == [1.0, 0.0, 1.0, 0.0]


def test_text_data_failures_get_no_chat_note():
    result = _score([trl_positional_on_chat], columns={})
    assert result.failed("trl_positional_on_chat") == 4
    assert "message lists" not in result.errors["trl_positional_on_chat"]


@pytest.mark.parametrize("keyword", ["trainer_state", "log_extra", "log_metric"])
def test_a_function_needing_a_keyword_steadyrl_does_not_pass_is_refused_naming_it(tmp_path, keyword):
    (tmp_path / "trl_rewards.py").write_text(
        f"def needs(completions, {keyword}, **kwargs):\n    return [0.0] * len(completions)\n"
        f"def optional(completions, {keyword}=None, **kwargs):\n    return [1.0] * len(completions)\n")
    with pytest.raises(Exception) as info:
        load_reward(f"{tmp_path / 'trl_rewards.py'}:needs")
    message = str(info.value)
    assert repr(keyword) in message and "steadyrl does" in message and "not" in message
    assert "no column" not in message
    optional = load_reward(f"{tmp_path / 'trl_rewards.py'}:optional")
    assert optional.reads_columns == ()
