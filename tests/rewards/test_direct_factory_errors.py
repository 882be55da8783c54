"""The factories of ``llm_judge``, ``reward_model``, ``http`` (and ``code``) called directly from Python, with a bad
option: a :class:`~steadyrl.errors.ConfigError` of one line naming the reward, the option, the value and what is
valid, as ``load_reward`` says it, not pydantic's multi-line ``ValidationError`` (found by
tests/rewards/test_reward_factories_differential.py: before the parameter objects, ``llm_judge(mode="rubric")``
without criteria raised a ConfigError; after, a ValidationError)."""

import pytest

from steadyrl.errors import ConfigError
from steadyrl.rewards import BUILTIN_REWARDS

JUDGE = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "check_url": False}
HTTP = {"url": "http://127.0.0.1:9/score", "check_url": False}


@pytest.mark.parametrize("name, options, names", [
    ("llm_judge", {**JUDGE, "mode": "rubric"}, ["mode 'rubric' needs criteria"]),
    ("llm_judge", {**JUDGE, "backend": "vllm"}, ["backend", "'vllm'", "'openai' or 'local'"]),
    ("llm_judge", {**JUDGE, "bacth_size": 2}, ["bacth_size", "did you mean 'batch_size'?"]),
    ("llm_judge", {**JUDGE, "min_score": 5, "max_score": 1}, ["max_score", "min_score"]),
    ("llm_judge", {"base_url": "http://127.0.0.1:9/v1"}, ["option model", "required"]),
    ("http", {**HTTP, "batch_size": 0}, ["batch_size=0", "greater than or equal to 1"]),
    ("http", {"batch_size": 2}, ["option url", "required"]),
    ("reward_model", {"model": "x", "normalize": "fixed", "mean": 1.0}, ["normalize='fixed' needs"]),
    ("reward_model", {"model": "x", "normalize": "fixed", "mean": 0.0, "std": 0}, ["std=0", "greater than 0"]),
    ("code", {"test_timeout_s": -1}, ["test_timeout_s=-1", "greater than 0"]),
])
def test_a_direct_call_with_a_bad_option_is_a_one_line_config_error_naming_it(name, options, names):
    with pytest.raises(ConfigError) as err:
        BUILTIN_REWARDS[name](**options)
    message = str(err.value)
    assert message.startswith(f"{name} reward: ") and "\n" not in message and "pydantic" not in message, message
    for part in names:
        assert part in message, message
