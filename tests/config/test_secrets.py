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
    # a user function's options (a built-in's are typed: an unknown api_key would be refused)
    path.write_text(f"rewards:\n  - name: my_rewards:judged\n    options: {{pattern: '^a', api_key: {SECRET}}}\n")
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


# --- {env:} at any depth, redaction by value, and a type whose repr is redacted (issue 19.13, 25.8) ------------

HEADER_SECRET = "sk-header-0123456789abcdef"


def test_an_env_reference_inside_the_http_rewards_headers_is_read_and_sent(monkeypatch):
    from support_http import ScriptedServer

    monkeypatch.setenv("SCORER_AUTH", "Bearer tok-from-env-42")
    with ScriptedServer(lambda n, path, body: (200, {"scores": [1.0]})) as server:
        fn = load_reward("http", url=server.url, check_url=False, headers={"Authorization": {"env": "SCORER_AUTH"},
                                                                          "X-Plain": "yes"})
        assert fn(["p"], ["c"]) == [1.0]
    sent = server.requests[0][2]
    assert sent["Authorization"] == "Bearer tok-from-env-42" and sent["X-Plain"] == "yes"
    assert "tok-from-env-42" not in repr(fn) + repr(fn.headers)


def test_an_env_reference_nested_in_a_user_functions_options_reaches_the_function(tmp_path, monkeypatch):
    (tmp_path / "judge.py").write_text("def judged(prompts, completions, conn=None, **columns):\n"
                                       "    return [float(conn['auth'][0] == 'sk-from-env')] * len(completions)\n")
    monkeypatch.setenv("JUDGE_KEY", "sk-from-env")
    fn = load_reward(f"{tmp_path / 'judge.py'}:judged", conn={"auth": [{"env": "JUDGE_KEY"}]})
    assert fn(["p"], ["c"]) == [1.0]
    monkeypatch.delenv("JUDGE_KEY")
    with pytest.raises(RewardLoadError, match=r"conn\.auth\[0\].*JUDGE_KEY is not set"):
        load_reward(f"{tmp_path / 'judge.py'}:judged", conn={"auth": [{"env": "JUDGE_KEY"}]})


def _config_with_header(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("rewards:\n  - name: http\n    options:\n      url: 'http://127.0.0.1:9/score?key=" + SECRET
                    + "'\n      check_url: false\n      headers: {X-Api-Key: " + SECRET + ", Authorization: 'Bearer "
                    + HEADER_SECRET + "', Cookie: 'session=" + HEADER_SECRET + "', X-Trace: plain-value}\n")
    return load_config(path)


def test_header_values_and_a_secret_repeated_elsewhere_are_never_written_in_clear(tmp_path, monkeypatch):
    import sys
    import types

    from steadyrl.tracking import Tracker

    config = _config_with_header(tmp_path)
    save_config(config, tmp_path / "saved.yaml")
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(
        init=lambda **kw: calls.append(kw) or types.SimpleNamespace(log=lambda *a, **k: None, finish=lambda: None)))
    from steadyrl.config.loading import config_to_dict

    with Tracker(tmp_path / "run", ["wandb"], config=config_to_dict(config)):
        pass
    for text in ((tmp_path / "saved.yaml").read_text(), render_config(config), repr(calls[0]["config"])):
        assert SECRET not in text and HEADER_SECRET not in text
        assert "plain-value" in text and "127.0.0.1:9/score?key=" in text


def test_a_reward_spec_and_its_options_never_show_a_resolved_secret(tmp_path, monkeypatch):
    import pickle

    from steadyrl.rewards import RewardSpec
    from steadyrl.secrets import Secret, reveal

    (tmp_path / "judge.py").write_text(REWARD)
    monkeypatch.setenv("JUDGE_KEY", "sk-from-env")
    spec = RewardSpec.load(f"{tmp_path / 'judge.py'}:judged", api_key={"env": "JUDGE_KEY"})
    for text in (repr(spec), str(spec), repr(spec.fn), f"{spec.fn.keywords}", f"{spec.fn.keywords['api_key']:>20}"):
        assert "sk-from-env" not in text and REDACTED in text
    assert spec.fn(["p"], ["c"]) == [1.0]  # revealed where it is sent: the call
    again = pickle.loads(pickle.dumps(spec.fn))  # as it goes to a worker process
    assert again(["p"], ["c"]) == [1.0] and "sk-from-env" not in repr(again)
    assert redact_secrets({"anything": "key sk-from-env-xyz", "nested": [Secret("another-secret")]}) == \
        {"anything": f"key {REDACTED}-xyz", "nested": [REDACTED]}
    assert reveal({"a": [Secret("x")]}) == {"a": ["x"]}


def test_a_failure_message_quoting_a_resolved_key_is_redacted_on_the_command_line(tmp_path, monkeypatch, capsys):
    from steadyrl import cli

    (tmp_path / "judge.py").write_text("import os\nraise RuntimeError('bad key ' + os.environ['JUDGE_KEY'])\n")
    (tmp_path / "cfg.yaml").write_text(f"rewards:\n  - name: {tmp_path / 'judge.py'}:judged\n    options: "
                                       "{api_key: {env: JUDGE_KEY}}\n")
    monkeypatch.setenv("JUDGE_KEY", "sk-quoted-by-a-library")
    assert cli.main(["train", str(tmp_path / "cfg.yaml"), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "sk-quoted-by-a-library" not in err and f"bad key {REDACTED}" in err
