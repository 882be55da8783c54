"""Every built-in reward's options are a typed model (steadyrl/config/reward_options.py): the
models match the factories, and a bad option stops the config load naming rewards[i].options.<key>,
the value and what is valid."""

from __future__ import annotations

import inspect

import pytest

from steadyrl.config import load_config
from steadyrl.config.reward_options import REWARD_OPTIONS
from steadyrl.errors import ConfigError
from steadyrl.rewards import BUILTIN_REWARDS


def test_every_built_in_reward_has_an_options_model():
    assert set(REWARD_OPTIONS) == set(BUILTIN_REWARDS)


@pytest.mark.parametrize("name", sorted(BUILTIN_REWARDS))
def test_the_model_has_the_factorys_options_with_its_defaults_and_help(name):
    params = inspect.signature(BUILTIN_REWARDS[name]).parameters
    fields = REWARD_OPTIONS[name].model_fields
    if [p.kind for p in params.values()] == [inspect.Parameter.VAR_KEYWORD]:  # factory(**options) -> the model
        # (code, llm_judge, http, reward_model; test_reward_parameters: every option is read)
        assert all(field.description for field in fields.values())
        return
    assert list(sorted(fields)) == sorted(params)
    for key, param in params.items():
        field = fields[key]
        assert field.description, f"{name}.{key} has no help"
        if param.default is inspect.Parameter.empty:
            assert field.is_required(), f"{name}.{key}"
        else:
            assert field.default == param.default, f"{name}.{key}"


@pytest.mark.parametrize(("reward", "problem"), [
    ("{name: code, options: {workers: 0}}", "rewards[0].options.workers = 0: Input should be greater than or equal to 1"),
    ("{name: code, options: {score: best}}", "rewards[0].options.score = 'best': Input should be 'pass_rate' or 'all_pass'"),
    ("{name: code, options: {no_network: 'yes'}}", "rewards[0].options.no_network = 'yes': Input should be a valid boolean"),
    ("{name: math, options: {answer_colum: x}}",
     "rewards[0].options.answer_colum = 'x': unknown option of the math reward; did you mean 'answer_key'?"),
    ("{name: reward_model}", "rewards[0].options.model: required by the reward_model reward"),
    ("{name: length_penalty, options: {target_length: 5, max_length: 3}}",
     "rewards[0].options: max_length=3 must be greater than target_length=5"),
    ("{name: http, options: {url: 'http://h/s', batch_size: true}}",
     "rewards[0].options.batch_size = True: Input should be a valid integer"),
    ("{name: llm_judge, options: {model: m, backend: local, base_url: 'http://h/v1'}}",
     "rewards[0].options: base_url and api_key_env go with backend 'openai', not 'local'"),
])
def test_a_bad_built_in_option_stops_the_config_load_naming_key_value_and_what_is_valid(reward, problem):
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"rewards=[{reward}]"])
    assert problem in str(info.value)


def test_every_problem_of_the_options_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["rewards=[{name: math}, {name: code, options: {workers: 0, memory_mb: 8}}]"])
    assert "rewards[1].options.workers = 0" in str(info.value) and "rewards[1].options.memory_mb = 8" in str(info.value)


def test_an_env_reference_counts_as_given_and_is_checked_once_read():
    config = load_config(None, ["rewards=[{name: http, options: {url: {env: SCORER_URL}}}]"])
    assert config.rewards[0].options == {"url": {"env": "SCORER_URL"}}


def test_user_functions_take_any_options():
    config = load_config(None, ["rewards=[{name: 'my_rewards:fn', options: {anything: [1, 2]}}]"])
    assert config.rewards[0].options == {"anything": [1, 2]}
