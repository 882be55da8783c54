"""The model and server rewards (``llm_judge``, ``http``, ``reward_model``) take their options as
``factory(**options)``, checked by their typed model (steadyrl/config/reward_options.py), and group
them once into small parameter objects (steadyrl/rewards/params.py, ``Judging``, ``TextScoring``,
``Normalization``). Without a keyword signature to compare with the model, these tests pin that no
option is dropped on the way: every option of the model is read when the reward is built, and the
values land in the parameter objects."""

from __future__ import annotations

import types

import pytest

from steadyrl.config import reward_options
from steadyrl.rewards import cached, judge, judge_local, load_reward, reward_model
from steadyrl.rewards.params import Caching, Endpoint, LocalModel, RequestLimits
from steadyrl.secrets import reveal


def recording(monkeypatch, name: str) -> set:
    """Replace the options model ``name`` by a subclass that notes each field read after it is built
    (the model's own checks, which read fields while validating, do not count)."""
    model = getattr(reward_options, name)
    fields, read, armed = set(model.model_fields), set(), []

    class Recording(model):
        def __init__(self, **options):
            super().__init__(**options)
            armed.append(True)

        def __getattribute__(self, attr):
            if armed and attr in fields:
                read.add(attr)
            return super().__getattribute__(attr)

    monkeypatch.setattr(reward_options, name, Recording)
    for reward, options in list(reward_options.REWARD_OPTIONS.items()):  # the factories read it from there
        if options is model:
            monkeypatch.setitem(reward_options.REWARD_OPTIONS, reward, Recording)
    return read


def stub_local_judge(monkeypatch) -> list:
    built = []
    monkeypatch.setattr(judge_local, "LocalJudge", lambda *args, **kwargs: built.append((args, kwargs)))
    return built


def test_every_llm_judge_option_is_read_by_one_of_its_backends_or_modes(monkeypatch):
    read = recording(monkeypatch, "LlmJudgeOptions")
    stub_local_judge(monkeypatch)
    load_reward("llm_judge", model="j", base_url="http://127.0.0.1:9/v1", check_url=False)
    load_reward("llm_judge", model="j", base_url="http://127.0.0.1:9/v1", check_url=False, mode="rubric",
                criteria=[{"text": "is polite"}])
    load_reward("llm_judge", model="j", backend="local")
    assert sorted(set(reward_options.LlmJudgeOptions.model_fields) - read) == []


def test_every_http_option_is_read(monkeypatch):
    read = recording(monkeypatch, "HttpOptions")
    load_reward("http", url="http://127.0.0.1:9/score", check_url=False)
    assert sorted(set(reward_options.HttpOptions.model_fields) - read) == []


def fake_classifier(monkeypatch, labels: int = 3):
    config = types.SimpleNamespace(architectures=["TinyForSequenceClassification"], num_labels=labels)
    monkeypatch.setattr(reward_model, "load_model_config", lambda *args: config)


def test_every_reward_model_option_is_read(monkeypatch):
    read = recording(monkeypatch, "RewardModelOptions")
    fake_classifier(monkeypatch)
    load_reward("reward_model", model="rm", device="cpu", label_index=1)
    assert sorted(set(reward_options.RewardModelOptions.model_fields) - read) == []


def test_the_http_judges_options_land_in_its_parameter_objects(monkeypatch):
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "k-123")
    fn = load_reward("llm_judge", model="judge-7", base_url="http://127.0.0.1:9/v1/", check_url=False,
                     api_key_env="JUDGE_KEY_FOR_TEST", template="Rate {completion} given {answer}",
                     system_prompt="be fair", pattern=r"score=(\d+)", min_score=1, max_score=5, scale=False,
                     answer_key="gold", max_new_tokens=7, concurrency=3, retries=5, backoff_s=0.25,
                     request_timeout_s=12, cache_size=9)
    assert fn.limits == RequestLimits(concurrency=3, retries=5, backoff_s=0.25, request_timeout_s=12.0)
    assert (fn.cache_size, fn.answer_key, fn.reads_columns) == (9, "gold", ("gold",))
    assert (fn.url, fn.model, reveal(fn.headers)) == ("http://127.0.0.1:9/v1/chat/completions", "judge-7",
                                              {"Authorization": "Bearer k-123"})
    j = fn.judging
    assert (j.template, j.system_prompt, j.max_new_tokens, j.rubric) == ("Rate {completion} given {answer}",
                                                                         "be fair", 7, None)
    assert (j.parser.regex.pattern, j.parser.min, j.parser.max, j.parser.scale) == (r"score=(\d+)", 1.0, 5.0, False)
    assert j.parser.parse("score=4 of 5") == 4.0


def test_the_rubric_options_land_in_the_judging(monkeypatch):
    fn = load_reward("llm_judge", model="j", base_url="http://127.0.0.1:9/v1", check_url=False, mode="rubric",
                     criteria=[{"text": "is polite", "weight": 2}, {"text": "is short"}],
                     rubric_template="Does {completion} meet {criterion}?")
    assert fn.judging.template == "Does {completion} meet {criterion}?"
    assert fn.judging.rubric.fixed == [("is polite", 2.0), ("is short", 1.0)] and fn.judging.rubric.key is None
    keyed = load_reward("llm_judge", model="j", base_url="http://127.0.0.1:9/v1", check_url=False, mode="rubric",
                        criteria_key="rubric")
    assert keyed.judging.rubric.key == "rubric" and keyed.reads_columns == ("rubric",)


def test_the_local_judges_options_land_in_its_parameter_objects(monkeypatch):
    built = stub_local_judge(monkeypatch)
    load_reward("llm_judge", model="some/judge", backend="local", revision="r1", device="cpu", dtype="bfloat16",
                batch_size=3, cache_size=0, answer_key="gold", max_new_tokens=5)
    (judging, model, caching), kwargs = built[0]
    assert model == LocalModel("some/judge", "r1", "cpu", "bfloat16", trust_remote_code=False)
    assert caching == Caching(0, "gold") and kwargs == {"batch_size": 3} and judging.max_new_tokens == 5


def test_the_http_rewards_options_land_in_its_parameter_objects(monkeypatch):
    fn = load_reward("http", url="http://127.0.0.1:9/score", batch_size=5, concurrency=2, columns=["source"],
                     headers={"X-Team": "rl"}, retries=1, backoff_s=0.5, request_timeout_s=3, check_url=False,
                     answer_key="gold", cache_size=4)
    assert fn.limits == RequestLimits(concurrency=2, retries=1, backoff_s=0.5, request_timeout_s=3.0)
    assert (fn.url, fn.headers, fn.batch_size, fn.columns, fn.reads_columns) == (
        "http://127.0.0.1:9/score", {"X-Team": "rl"}, 5, ["source"], ("source",))
    assert (fn.cache_size, fn.answer_key) == (4, "gold")


def test_the_reward_models_options_land_in_its_parameter_objects(monkeypatch):
    fake_classifier(monkeypatch)
    fn = load_reward("reward_model", model="rm", revision="main", device="cpu", dtype="float32", batch_size=2,
                     max_length=64, normalize="fixed", mean=0.5, std=2, label_index=2, chat_template=False,
                     trust_remote_code=True, cache_size=11)
    assert (fn.source, fn.revision, fn.trust_remote_code, fn.label_index) == ("rm", "main", True, 2)
    assert (fn.batch_size, fn.max_length, fn.chat_template, fn.cache_size) == (2, 64, False, 11)
    assert fn.finish([2.5, None]) == [1.0, None]  # (2.5 - 0.5) / 2


def test_the_cache_default_is_the_one_of_the_options():
    assert cached.DEFAULT_CACHE_SIZE == reward_options.DEFAULT_CACHE_SIZE


def test_a_parameter_object_is_frozen():
    limits = RequestLimits(concurrency=1, retries=0, backoff_s=0.0, request_timeout_s=1.0)
    with pytest.raises(AttributeError):
        limits.retries = 9  # type: ignore[misc]
    assert Endpoint("http://h/", None, False).headers is None


def test_a_factory_called_directly_checks_its_options_like_the_config_does():
    """``llm_judge(...)`` in Python (not through load_reward) still refuses an unknown or bad option."""
    with pytest.raises(ValueError, match="max_scor"):
        judge.llm_judge(model="j", base_url="http://127.0.0.1:9/v1", check_url=False, max_scor=3)
    with pytest.raises(ValueError, match="greater than min_score"):
        judge.llm_judge(model="j", base_url="http://127.0.0.1:9/v1", check_url=False, min_score=5, max_score=5)
