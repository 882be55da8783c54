"""A secret in a reward's options (an ``api_key``) is never written: not to config.yaml, not by
``steadyrl config show``; ``{env: NAME}`` takes it from the environment when the reward is built,
and a ``<redacted>`` value coming back from a saved config is an error that says so."""

from __future__ import annotations

import pytest

from steadyrl.config import load_config, render_config, save_config
from steadyrl.config.loading import _all_paths
from steadyrl.config.schema import Config, RewardConfig
from steadyrl.errors import RewardLoadError
from steadyrl.rewards import load_reward
from steadyrl.secrets import REDACTED, is_secret_name, redact_secrets

SECRET = "sk-live-0123456789abcdef"
REWARD = """
def judged(prompts, completions, api_key=None, **columns):
    return [float(api_key == "sk-from-env")] * len(completions)
"""


@pytest.mark.parametrize("name", ["api_key", "apikey", "OPENAI_API_KEY", "judge-api-key", "token", "hf_token",
                                  "access_token", "secret", "client_secret", "password", "db_passwd",
                                  "credentials", "aws_secret_access_key", "private_key", "auth"])
def test_secret_looking_names_are_recognised(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["max_tokens", "max_new_tokens", "tokenizer", "prompt_key", "answer_key",
                                  "sort_key", "keys", "author", "pattern", "marker"])
def test_ordinary_names_are_left_alone(name):
    assert not is_secret_name(name)


def test_no_config_field_is_mistaken_for_a_secret():
    paths = _all_paths(Config) + _all_paths(RewardConfig)
    assert not [p for p in paths if is_secret_name(p.rsplit(".", 1)[-1])]


def test_redaction_keeps_env_references_nulls_and_everything_else():
    options = {"api_key": SECRET, "hf_token": {"env": "HF_TOKEN"}, "password": None, "model": "judge-7b",
               "nested": {"client_secret": 42}, "list": [{"token": "t"}]}
    assert redact_secrets(options) == {"api_key": REDACTED, "hf_token": {"env": "HF_TOKEN"}, "password": None,
                                       "model": "judge-7b", "nested": {"client_secret": REDACTED},
                                       "list": [{"token": REDACTED}]}
    assert options["api_key"] == SECRET  # a copy: the config itself is not changed


def _config_with_secret(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(f"rewards:\n  - name: regex_format\n    options: {{pattern: '^a', api_key: {SECRET}}}\n")
    return load_config(path)


def test_config_yaml_and_config_show_never_hold_the_secret(tmp_path):
    config = _config_with_secret(tmp_path)
    assert config.rewards[0].options["api_key"] == SECRET  # the run itself gets it
    save_config(config, tmp_path / "saved.yaml")
    saved = (tmp_path / "saved.yaml").read_text()
    shown = render_config(config)
    for text in (saved, shown):
        assert SECRET not in text and REDACTED in text and "^a" in text
    assert load_config(tmp_path / "saved.yaml").rewards[0].options == {"pattern": "^a", "api_key": REDACTED}


def test_an_env_option_is_read_from_the_environment_when_the_reward_is_built(tmp_path, monkeypatch):
    (tmp_path / "judge.py").write_text(REWARD)
    monkeypatch.setenv("JUDGE_KEY", "sk-from-env")
    fn = load_reward(f"{tmp_path / 'judge.py'}:judged", api_key={"env": "JUDGE_KEY"})
    assert fn(["p"], ["c"]) == [1.0]
    monkeypatch.delenv("JUDGE_KEY")
    with pytest.raises(RewardLoadError, match="api_key.*JUDGE_KEY is not set"):
        load_reward(f"{tmp_path / 'judge.py'}:judged", api_key={"env": "JUDGE_KEY"})


def test_a_redacted_option_is_refused_with_the_way_to_give_it(tmp_path):
    (tmp_path / "judge.py").write_text(REWARD)
    with pytest.raises(RewardLoadError, match=r"api_key.*<redacted>.*\{env: VAR_NAME\}"):
        load_reward(f"{tmp_path / 'judge.py'}:judged", api_key=REDACTED)
