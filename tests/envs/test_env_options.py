"""An adapter spec's options are read as its typed model declares them (steadyrl/envs/options.py):
the default when absent, the type and the lower bound checked, with the words the adapters always used."""

from __future__ import annotations

import pytest

from steadyrl.envs.options import OpenEnvServer, ReasoningGymRows, TextArenaRows
from steadyrl.envs.spec import parse_spec, take
from steadyrl.errors import ConfigError

KEY = "rollout.multi_turn.environment"


@pytest.mark.parametrize("query, name, message", [
    ("timeout_s=0", "timeout_s", "option timeout_s=0 must be an integer or a number >= 1"),
    ("timeout_s=true", "timeout_s", "option timeout_s=True must be an integer or a number >= 1"),
    ("observation_key=5", "observation_key", "option observation_key=5 must be text or null"),
    ("seed=1", "seed", "option seed=1 must be true or false"),
    ("action_key=3", "action_key", "option action_key=3 must be text"),
])
def test_a_bad_openenv_option_names_what_its_model_accepts(query, name, message):
    spec = parse_spec(f"openenv:http://127.0.0.1:1?{query}", KEY)
    with pytest.raises(ConfigError, match=message):
        take(dict(spec.options), name, spec, KEY, OpenEnvServer)


def test_an_absent_option_is_its_models_default():
    spec = parse_spec("reasoning_gym:basic_arithmetic?size=5", "data.train_path")
    options = dict(spec.options)
    got = {name: take(options, name, spec, "data.train_path", ReasoningGymRows) for name in ReasoningGymRows.model_fields}
    assert got == {"seed": 0, "size": 5, "test_size": 100, "system_prompt": "default", "instruction": ""}
    assert options == {}


def test_a_bound_comes_from_the_model():
    spec = parse_spec("textarena:TicTacToe-v0?seed=-1", "data.train_path")
    with pytest.raises(ConfigError, match=r"option seed=-1 must be an integer >= 0"):
        take(dict(spec.options), "seed", spec, "data.train_path", TextArenaRows)
