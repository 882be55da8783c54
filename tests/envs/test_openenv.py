"""OpenEnv through ``openenv-core``'s client, against a small environment server started here on
127.0.0.1 (``openenv_server.py``, which exits by itself): episodes reset with their seed, the
policy's text goes in the action field, observations and rewards come back; a server that is
not running or an action field it lacks is refused before any model loads."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openenv.core", reason="pip install 'steadyrl[openenv]'")

from steadyrl.agents.environment import EnvServer, load_environment  # noqa: E402
from steadyrl.errors import ConfigError  # noqa: E402

SERVER = Path(__file__).with_name("openenv_server.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), str(port), "120"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the OpenEnv test server did not start: {proc.stderr.read()[-2000:]}")
            time.sleep(0.2)
    yield url
    proc.kill()
    proc.wait(timeout=30)


def test_an_episode_resets_with_its_seed_and_steps_with_the_policys_text(server_url):
    cls = load_environment(f"openenv:{server_url}?action_key=message")
    target = random.Random(5).randint(0, 9)
    env = cls()
    assert env.reset(seed=5, prompt="ignored") == "Guess my number (0-9)."  # the one text field, automatic
    wrong = (target + 1) % 10
    assert env.step(str(wrong)) == ("lower" if wrong > target else "higher", 0.0, False)
    assert env.step(str(target)) == ("right", 1.0, True)
    env.close()


def test_episodes_through_the_env_server_keep_separate_sessions(server_url):
    cls = load_environment(f"openenv:{server_url}?observation_key=prompt")
    servers = [EnvServer(cls, "user") for _ in range(3)]
    for seed, server in enumerate(servers):
        assert server(("reset", {"prompt": "p"}, seed))[0]["content"] == "Guess my number (0-9)."
    for seed, server in enumerate(servers):  # each session answers for its own seed's number
        target = random.Random(seed).randint(0, 9)
        messages, reward, done = server(("step", str(target)))
        assert messages == [{"role": "user", "content": "right"}] and reward == 1.0 and done
        server(("close",))


def test_an_episode_ends_when_the_server_says_done(server_url):
    env = load_environment(f"openenv:{server_url}")()
    env.reset(seed=1)
    replies = [env.step("x") for _ in range(4)]
    assert [done for _, _, done in replies] == [False, False, False, True]
    env.close()


@pytest.mark.parametrize("spec, needle", [
    ("openenv:{url}?action_key=code", "the server's actions have the fields ['message', 'metadata']"),
    ("openenv:{url}?seed=maybe", "option seed='maybe' must be true or false"),
    ("openenv:{url}?retries=3", "unknown option(s) ['retries']"),
    ("openenv:localhost", "is not a server URL"),
])
def test_bad_openenv_specs_are_config_errors(server_url, spec, needle):
    with pytest.raises(ConfigError) as err:
        load_environment(spec.format(url=server_url))
    assert needle in str(err.value) and "rollout.multi_turn.environment" in str(err.value)


def test_a_server_that_is_not_running_is_refused_at_start_up():
    with pytest.raises(ConfigError, match="start the server first"):
        load_environment(f"openenv:http://127.0.0.1:{_free_port()}")


def test_a_missing_package_names_the_pip_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openenv.core", None)
    with pytest.raises(ConfigError, match=r"pip install 'steadyrl\[openenv\]'"):
        load_environment("openenv:http://127.0.0.1:1")


def test_training_on_an_openenv_server(server_url, chat_model, steadyrl_cli, tmp_path):
    """End to end: episodes in sandbox workers (the default isolation) reach the loopback server."""
    import json

    import yaml

    rows = [{"prompt": f"Round {i}: guess."} for i in range(8)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"model": {"name_or_path": str(chat_model)},
              "data": {"train_path": str(tmp_path / "train.jsonl")},
              "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 24,
                          "multi_turn": {"environment": f"openenv:{server_url}", "max_turns": 4,
                                         "max_observation_tokens": 64}},
              "trainer": {"max_steps": 2, "save_every": 0, "num_threads": 1, "samples_every": 1}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    proc = steadyrl_cli("train", str(tmp_path / "cfg.yaml"), "--output-dir", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [m for m in metrics if "rollout/turns_mean" in m]
    assert len(steps) == 2 and all(m["rollout/failed_episodes"] == 0.0 for m in steps)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    replies = {m["content"] for s in samples for m in s["turns"] if m["role"] == "user"}
    assert replies and replies <= {"higher", "lower", "right"}  # the server's answers reached the policy
