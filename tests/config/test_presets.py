"""Algorithm presets: explicit defaults for the ``algorithm`` section only, filling only what the
user left unset; each validates and holds what its comment promises."""

from __future__ import annotations

import copy
import typing

import pytest

from steadyrl.config import ALGORITHM_PRESETS, Config, load_config
from steadyrl.config.presets import DEFAULT_PRESET, apply_preset
from steadyrl.config.schema import AlgorithmConfig, PresetName
from steadyrl.errors import ConfigError

# What each preset's comment in steadyrl/config/presets.py promises.
PROMISES = {
    "grpo": {"advantage_estimator": "grpo", "norm_by_std": True, "policy_loss": "ppo",
             "kl_mode": "loss", "kl_estimator": "k3"},
    "dr_grpo": {"advantage_estimator": "grpo", "norm_by_std": False,
                "loss_agg_mode": "seq-mean-token-sum-norm", "kl_mode": "none"},
    "ppo": {"advantage_estimator": "gae", "lam": 0.95, "gamma": 1.0, "whiten_advantages": True,
            "kl_mode": "reward", "kl_estimator": "k1"},
    "rloo": {"advantage_estimator": "rloo", "kl_mode": "reward", "kl_estimator": "k1"},
    "reinforce_plus_plus": {"advantage_estimator": "reinforce_plus_plus", "kl_mode": "reward",
                            "kl_estimator": "k1", "gamma": 1.0},
    "gspo": {"advantage_estimator": "grpo", "policy_loss": "gspo", "loss_agg_mode": "seq-mean-token-mean",
             "clip_low": 3e-4, "clip_high": 4e-4},
    "cispo": {"advantage_estimator": "grpo", "policy_loss": "cispo", "clip_low": 1.0, "clip_high": 0.28},
}


def test_the_preset_names_are_the_schemas_choices():
    assert set(ALGORITHM_PRESETS) == set(typing.get_args(PresetName)) == set(PROMISES)
    assert DEFAULT_PRESET == AlgorithmConfig().preset == "grpo"


@pytest.mark.parametrize("name", sorted(ALGORITHM_PRESETS))
def test_every_preset_names_only_algorithm_fields(name):
    assert set(ALGORITHM_PRESETS[name]) <= set(AlgorithmConfig.model_fields) - {"preset"}


@pytest.mark.parametrize("name", sorted(PROMISES))
def test_every_preset_validates_with_the_values_it_promises(name, tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(f"algorithm:\n  preset: {name}\n")
    config, filled = load_config(path, with_sources=True)
    algo = config.algorithm
    assert algo.preset == name
    for key, value in PROMISES[name].items():
        assert getattr(algo, key) == value, key
    for key, value in ALGORITHM_PRESETS[name].items():
        assert getattr(algo, key) == value, key
    assert filled == {f"algorithm.{key}" for key in ALGORITHM_PRESETS[name]}


def test_the_schema_defaults_agree_with_the_default_preset(tmp_path):
    """A config with no preset written means grpo, and Config() holds the same values."""
    path = tmp_path / "cfg.yaml"
    path.write_text("")
    assert load_config(path).algorithm == Config().algorithm
    for key, value in ALGORITHM_PRESETS[DEFAULT_PRESET].items():
        assert getattr(Config().algorithm, key) == value


def _other_value(key: str, value):
    """A valid value of ``algorithm.key`` that differs from ``value``."""
    annotation = AlgorithmConfig.model_fields[key].annotation
    choices = typing.get_args(annotation)
    if isinstance(value, bool):
        return not value
    if isinstance(value, str):
        return next(c for c in choices if c != value and c not in ("gae",))
    return value / 2 + 0.01


@pytest.mark.parametrize("name", sorted(ALGORITHM_PRESETS))
def test_the_users_values_beat_the_preset(name):
    preset = ALGORITHM_PRESETS[name]
    mine = {key: _other_value(key, value) for key, value in preset.items()}
    overrides = [f"algorithm.preset={name}"] + [f"algorithm.{k}={v}" for k, v in mine.items()]
    config, filled = load_config(None, overrides, with_sources=True)
    for key, value in mine.items():
        assert getattr(config.algorithm, key) == value, key
    assert filled == set()


@pytest.mark.parametrize("name", sorted(ALGORITHM_PRESETS))
def test_a_preset_fills_only_the_unset_keys_of_the_algorithm_section(name):
    raw = {"algorithm": {"preset": name, "kl_coef": 0.5}, "optim": {"lr": 1e-5}, "trainer": {"max_steps": 3}}
    before = copy.deepcopy(raw)
    out, filled = apply_preset(raw)
    assert raw == before  # the input is not modified
    assert {k: v for k, v in out.items() if k != "algorithm"} == {k: v for k, v in raw.items() if k != "algorithm"}
    assert out["algorithm"]["kl_coef"] == 0.5
    expected = {key: value for key, value in ALGORITHM_PRESETS[name].items() if key != "kl_coef"}
    assert {k: v for k, v in out["algorithm"].items() if k not in ("preset", "kl_coef")} == expected
    assert filled == {f"algorithm.{key}" for key in expected}


def test_a_user_null_is_a_value_the_preset_does_not_replace():
    with pytest.raises(ConfigError, match=r"algorithm.kl_coef = None"):
        load_config(None, ["algorithm.preset=rloo", "algorithm.kl_coef=null"])


def test_the_demo_config_keeps_its_explicit_kl_mode_over_the_grpo_preset():
    config, filled = load_config(None, with_sources=True)
    assert config.algorithm.kl_mode == "none"
    assert "algorithm.kl_mode" not in filled
    assert "algorithm.advantage_estimator" in filled


@pytest.mark.parametrize("bad", ["grpo2", "GRPO", "[grpo]", "1"])
def test_an_unknown_preset_is_a_config_error_listing_the_presets(bad):
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"algorithm.preset={bad}"])
    message = str(info.value)
    assert "algorithm.preset" in message
    for name in ALGORITHM_PRESETS:
        assert repr(name) in message


def test_the_ppo_preset_with_lora_is_a_config_error():
    with pytest.raises(ConfigError, match="needs a critic"):
        load_config(None, ["algorithm.preset=ppo", "model.lora.enabled=true"])
