"""reasoning-gym tasks as data: rows generated from the spec's seed (same seed, same rows; train and
held-out disjoint), the ``reasoning_gym`` reward equal to the task's own ``score_answer``, and every
bad spec a ConfigError naming the key before any model loads."""

from __future__ import annotations

import sys

import pytest

rg = pytest.importorskip("reasoning_gym", reason="pip install 'steadyrl[reasoning-gym]'")

from steadyrl.config.schema import Config  # noqa: E402
from steadyrl.data import eval_split_of, load_records  # noqa: E402
from steadyrl.errors import ConfigError  # noqa: E402
from steadyrl.rewards import load_reward  # noqa: E402

SPEC = "reasoning_gym:basic_arithmetic?size=40&test_size=30&seed=3&max_terms=3"


def _questions(rows):
    return [r["reasoning_gym"]["question"] for r in rows]


def test_the_same_spec_generates_the_same_rows_and_another_seed_others():
    first, again = load_records(SPEC), load_records(SPEC)
    assert first == again and len(first) == 40
    other = load_records(SPEC.replace("seed=3", "seed=4"))
    assert _questions(other) != _questions(first)


def test_held_out_rows_are_disjoint_from_training_rows_even_in_a_tiny_problem_space():
    # one-digit sums of two terms: few distinct questions, so the two seed streams collide
    spec = "reasoning_gym:basic_arithmetic?size=300&test_size=40&min_terms=2&max_terms=2&max_digits=1"
    train = load_records(spec)
    held_out = load_records(spec, split=eval_split_of(spec, None))
    assert eval_split_of(spec, None) == "test" and len(held_out) == 40
    assert not set(_questions(train)) & set(_questions(held_out))
    assert 0 < len(train) < 300  # the repeats of held-out questions were dropped


def test_rows_are_chat_prompts_by_default_or_the_bare_question():
    row = load_records(SPEC)[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert "<answer>" in row["prompt"][0]["content"] and row["prompt"][1]["content"] == row["reasoning_gym"]["question"]
    bare = load_records(SPEC + "&system_prompt=none")[0]
    assert bare["prompt"] == row["reasoning_gym"]["question"] and bare["answer"] == row["answer"]


def test_the_reward_is_the_tasks_own_score_answer():
    from reasoning_gym.utils import extract_answer

    rows = load_records("reasoning_gym:chain_sum?size=6&test_size=2&seed=1") + load_records(
        "reasoning_gym:letter_counting?size=6&test_size=2&seed=1")
    completions = []
    for i, row in enumerate(rows):  # right, wrong, untagged, and a near miss
        completions.append([f"<answer>{row['answer']}</answer>", "<answer>-999</answer>", str(row["answer"]),
                            f"think <answer> {row['answer']}.0 </answer>"][i % 4])
    fn = load_reward("reasoning_gym")
    got = fn([""] * len(rows), completions, reasoning_gym=[r["reasoning_gym"] for r in rows])
    expected = []
    for row, completion in zip(rows, completions):
        entry = row["reasoning_gym"]
        dataset = rg.create_dataset(entry["task"], **entry["config"])
        expected.append(dataset.score_answer(extract_answer(completion), {k: entry[k] for k in
                                                                          ("question", "answer", "metadata")}))
    assert got == expected and 1.0 in got and 0.0 in got


def test_the_reward_without_a_tag_scores_the_whole_completion():
    rows = load_records("reasoning_gym:chain_sum?size=3&test_size=1")
    fn = load_reward("reasoning_gym", answer_tag=None)
    assert fn([""] * 3, [f" {r['answer']}\n" for r in rows], reasoning_gym=[r["reasoning_gym"] for r in rows]) == [1.0] * 3


def test_an_instruction_is_appended_to_the_prompt_but_not_to_the_scored_question():
    spec = SPEC + "&instruction=Reply in the form: The answer is N."
    plain, told = load_records(SPEC), load_records(spec)
    assert told[0]["prompt"][1]["content"] == plain[0]["reasoning_gym"]["question"] + " Reply in the form: The answer is N."
    assert told[0]["reasoning_gym"]["question"] == plain[0]["reasoning_gym"]["question"]
    assert "instruction" not in told[0]["reasoning_gym"]["config"]  # not passed to the task's generator
    bare = load_records(spec + "&system_prompt=none")[0]
    assert bare["prompt"] == told[0]["prompt"][1]["content"]


def test_the_reward_with_a_marker_scores_what_follows_the_last_marker():
    rows = load_records("reasoning_gym:basic_arithmetic?size=4&test_size=1&max_terms=2&max_digits=1")
    entries = [r["reasoning_gym"] for r in rows]
    completions = [f"The answer is 999. No wait. The answer is {rows[0]['answer']}.",  # the last one counts
                   f"<answer>{rows[1]['answer']}</answer>",  # no marker: 0 (tags are not read)
                   f"The answer is  {rows[2]['answer']} \nThe end",  # rest of the line only
                   "The answer is -99999."]
    fn = load_reward("reasoning_gym", marker="The answer is")
    assert fn([""] * 4, completions, reasoning_gym=entries) == [1.0, 0.0, 1.0, 0.0]
    with pytest.raises(Exception, match="option marker"):
        load_reward("reasoning_gym", marker=" ")


@pytest.mark.parametrize("spec, needle", [
    ("reasoning_gym:basic_arithmetc", "did you mean 'basic_arithmetic'"),
    ("reasoning_gym:basic_arithmetic?bogus=1", "refuses its options {'bogus': 1}"),
    ("reasoning_gym:basic_arithmetic?min_terms=5&max_terms=2", "max_terms must be >= min_terms"),
    ("reasoning_gym:basic_arithmetic?size=0", "option size=0 must be an integer >= 1"),
    ("reasoning_gym:basic_arithmetic?size", "is not key=value"),
    ("reasoning_gym:basic_arithmetic?system_prompt=loud", "option system_prompt='loud'"),
    ("reasoning_gym:basic_arithmetic?instruction=42", "option instruction=42 must be text"),
    ("reasoning_gym:?size=3", "names no reasoning-gym task"),
])
def test_bad_specs_are_config_errors_naming_the_spec(spec, needle):
    with pytest.raises(ConfigError) as err:
        load_records(spec)
    assert needle in str(err.value) and spec.split("?")[0] in str(err.value)


def test_a_split_other_than_train_or_test_is_refused():
    with pytest.raises(ConfigError, match="splits \\['train', 'test'\\]"):
        load_records(SPEC, split="validation")


def test_a_missing_package_names_the_pip_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import reasoning_gym now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'steadyrl\[reasoning-gym\]'"):
        load_records(SPEC)
    with pytest.raises(ConfigError, match=r"pip install 'steadyrl\[reasoning-gym\]'"):
        load_reward("reasoning_gym")


def _config(data):
    return {"model": {"name_or_path": "m"}, "data": data}


def test_an_eval_source_must_read_the_held_out_split_and_a_train_source_the_training_one():
    task = "reasoning_gym:chain_sum"
    with pytest.raises(ValueError, match=r"data.eval_sources\[0\].split = None would read the training rows"):
        Config.model_validate(_config({"train_sources": [{"path": task}], "eval_sources": [{"path": task}]}))
    with pytest.raises(ValueError, match=r"data.split = 'test' would read the held-out rows"):
        Config.model_validate(_config({"train_path": task, "split": "test"}))
    ok = Config.model_validate(_config({"train_sources": [{"path": task + "?size=9"}, {"path": "reasoning_gym:aiw"}],
                                        "eval_sources": [{"path": task, "split": "test"}]}))
    assert [s.key for s in ok.data.train_sources] == ["chain_sum", "aiw"]  # metric names: the task


def test_the_configs_list_of_generated_paths_matches_the_adapters_that_make_rows():
    """config/schema.py cannot import steadyrl.envs (it sits below data/): its copy is kept equal here."""
    from steadyrl.config.schema import GENERATED
    from steadyrl.envs import ADAPTERS, is_spec

    assert all(is_spec(prefix + "x") for prefix in GENERATED)
    assert {p.rstrip(":") for p in GENERATED} == set(ADAPTERS) - {"openenv"}  # openenv gives no rows
