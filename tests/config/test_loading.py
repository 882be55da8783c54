"""Loading a config: YAML files, dotted overrides parsed as YAML, unknown keys with the nearest
valid key, and bad values reported as one ConfigError naming the field, the value and what
would be valid."""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from steadyrl.config import DEMO_CONFIG, Config, load_config, parse_override
from steadyrl.config.loading import _all_paths
from steadyrl.errors import ConfigError

# --- YAML files ------------------------------------------------------------------------------


def test_yaml_file_sets_values_and_leaves_the_rest_at_defaults(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("optim:\n  lr: 3.0e-6\nrollout:\n  group_size: 4\ntrainer:\n  trackers: [tensorboard]\n")
    config = load_config(path)
    assert config.optim.lr == 3e-6
    assert config.rollout.group_size == 4
    assert config.trainer.trackers == ["tensorboard"]
    assert config.rollout.max_new_tokens == Config().rollout.max_new_tokens


def test_empty_yaml_file_is_the_defaults_and_no_file_is_the_demo(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(path) == Config()
    assert load_config() == load_config(None, [])
    assert load_config().rollout.prompts_per_step == DEMO_CONFIG["rollout"]["prompts_per_step"]


def test_exponent_floats_without_a_dot_are_numbers_in_files_too(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("optim: {lr: 1e-6}\nrewards:\n  - {name: length_penalty, options: {scale: 5e-3}}\n")
    config = load_config(path)
    assert config.optim.lr == 1e-6
    assert config.rewards[0].options == {"scale": 5e-3}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("optim:\n  lr: [1\n", ("not valid YAML", "line")),
        ("- a\n- b\n", ("mapping of sections", "list")),
        ("just a string\n", ("mapping of sections", "str")),
    ],
    ids=["invalid YAML", "a list", "a scalar"],
)
def test_a_file_that_is_not_a_mapping_of_sections_is_one_line_config_error(tmp_path, text, words):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("make", [lambda p: p / "missing.yaml", lambda p: p], ids=["missing", "a directory"])
def test_a_config_path_that_is_not_a_file_is_a_config_error(tmp_path, make):
    with pytest.raises(ConfigError, match="config file"):
        load_config(make(tmp_path))


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_bytes(b"optim:\n  lr: \xff\xfe\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_config(path)


# --- dotted overrides ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7),
        ("-3", -3),
        ("0.5", 0.5),
        ("1e-6", 1e-6),
        ("3E-4", 3e-4),
        ("1.0e6", 1e6),
        ("-2e-3", -2e-3),
        (".inf", math.inf),
        ("true", True),
        ("false", False),
        ("null", None),
        ("~", None),
        ("[1, 2]", [1, 2]),
        ("[q_proj, v_proj]", ["q_proj", "v_proj"]),
        ("[]", []),
        ("{a: 1, b: [x]}", {"a": 1, "b": ["x"]}),
        ("hello", "hello"),
        ("'1'", "1"),
        ("'null'", "null"),
        ("a=b", "a=b"),
        ("some/path:fn", "some/path:fn"),
        ("[unclosed", "[unclosed"),
    ],
)
def test_override_values_are_parsed_as_yaml(value, expected):
    keys, parsed = parse_override(f"section.key={value}")
    assert keys == ["section", "key"]
    assert parsed == expected and type(parsed) is type(expected)


def test_override_keys_are_dotted_paths():
    assert parse_override("model.lora.r=8") == (["model", "lora", "r"], 8)
    assert parse_override(" trainer.seed =3") == (["trainer", "seed"], 3)


@pytest.mark.parametrize("text", ["trainer.seed", "=3", " =3"])
def test_an_override_without_key_and_value_is_a_config_error(text):
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_override(text)


def test_overrides_set_typed_values_and_the_last_one_wins(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("trainer: {max_steps: 10}\nmodel: {tokenizer: tok}\n")
    config = load_config(path, [
        "trainer.max_steps=20", "trainer.max_steps=30", "optim.lr=3e-4", "model.tokenizer=null",
        "model.lora.target_modules=[q_proj, v_proj]", "algorithm.dual_clip=true", "trainer.trackers=[]",
        "rewards=[{name: math, weight: 2}]",
    ])
    assert config.trainer.max_steps == 30
    assert config.optim.lr == 3e-4
    assert config.model.tokenizer is None
    assert config.model.lora.target_modules == ["q_proj", "v_proj"]
    assert config.algorithm.dual_clip is True
    assert config.trainer.trackers == []
    assert config.rewards[0].name == "math" and config.rewards[0].weight == 2.0


def test_an_override_into_a_value_is_a_config_error():
    with pytest.raises(ConfigError, match="algorithm.preset is not a section"):
        load_config(None, ["algorithm.preset.name=ppo"])


def test_loading_never_modifies_the_demo_config():
    before = copy.deepcopy(DEMO_CONFIG)
    load_config(None, ["rollout.group_size=2", "algorithm.preset=ppo", "trainer.max_steps=3"])
    assert DEMO_CONFIG == before


# --- unknown keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "bad", "suggestion"),
    [
        ("foo=1", "foo", None),
        ("lr=1e-5", "lr", "optim.lr"),
        ("trainer.lr=1e-5", "trainer.lr", "optim.lr"),
        ("algorithm.max_grad_norm=0.5", "algorithm.max_grad_norm", "optim.max_grad_norm"),
        ("trainer.temperature=0.7", "trainer.temperature", "rollout.temperature"),
        ("trainer.max_step=3", "trainer.max_step", "trainer.max_steps"),
        ("algorithm.pg_clp=0.1", "algorithm.pg_clp", "algorithm.pg_clip"),
        ("model.lora.rnk=4", "model.lora.rnk", None),  # too short to be close: the valid keys are listed
        ("model.lora.dropuot=0.1", "model.lora.dropuot", "model.lora.dropout"),
        ("rollout.vllm.gpu_mem=0.5", "rollout.vllm.gpu_mem", None),
        ("rewards=[{name: math, wieght: 2}]", "rewards[0].wieght", "rewards[0].weight"),
        ("rewards=[{name: math}, {name: x, timeout: 3}]", "rewards[1].timeout", "rewards[1].timeout_s"),
        # names TRL and verl users bring along
        ("trainer.learning_rate=1e-6", "trainer.learning_rate", "optim.lr"),
        ("rollout.num_generations=4", "rollout.num_generations", "rollout.group_size"),
        ("rollout.n=4", "rollout.n", "rollout.group_size"),
        ("algorithm.beta=0.04", "algorithm.beta", "algorithm.kl_coef"),
        ("algorithm.clip_ratio_high=0.28", "algorithm.clip_ratio_high", "algorithm.pg_clip_high"),
        ("algorithm.entropy_coeff=0.01", "algorithm.entropy_coeff", "algorithm.entropy_coef"),
    ],
)
def test_an_unknown_key_is_a_config_error_with_the_nearest_valid_key(override, bad, suggestion):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    message = str(info.value)
    assert f"unknown config key {bad!r}" in message
    if suggestion is None:
        assert "valid keys here:" in message
    else:
        assert f"did you mean {suggestion!r}" in message


def test_an_unknown_key_in_a_yaml_file_is_reported_with_its_path(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("model:\n  lora:\n    enabled: true\n    alpah: 16\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'model.lora.alpah'; did you mean 'model.lora.alpha'"):
        load_config(path)


def test_every_suggestion_is_a_valid_key():
    from steadyrl.config.loading import KNOWN_ALIASES

    paths = set(_all_paths(Config))
    assert set(KNOWN_ALIASES.values()) <= paths


# --- wrong types and out-of-range values ------------------------------------------------------

BAD_VALUES = [
    # override, field, value as shown, what would be valid
    ("algorithm.pg_clip=-0.1", "algorithm.pg_clip", "-0.1", "greater than or equal to 0"),
    ("algorithm.pg_clip_high=-1", "algorithm.pg_clip_high", "-1", "greater than or equal to 0"),
    ("algorithm.lam=1.5", "algorithm.lam", "1.5", "less than or equal to 1"),
    ("algorithm.lam=-0.1", "algorithm.lam", "-0.1", "greater than or equal to 0"),
    ("algorithm.gamma=2", "algorithm.gamma", "2", "less than or equal to 1"),
    ("algorithm.dual_clip_c=1", "algorithm.dual_clip_c", "1", "greater than 1"),
    ("rollout.group_size=0", "rollout.group_size", "0", "greater than or equal to 1"),
    ("rollout.group_size=four", "rollout.group_size", "'four'", "valid integer"),
    ("rollout.group_size=2.5", "rollout.group_size", "2.5", "integer"),
    ("rollout.temperature=0", "rollout.temperature", "0", "greater than 0"),
    ("rollout.temperature=-1", "rollout.temperature", "-1", "greater than 0"),
    ("rollout.top_p=1.5", "rollout.top_p", "1.5", "less than or equal to 1"),
    ("rollout.top_p=0", "rollout.top_p", "0", "greater than 0"),
    ("optim.lr=0", "optim.lr", "0", "greater than 0"),
    ("optim.betas=[1.5, 0.999]", "optim.betas[0]", "1.5", "less than 1"),
    ("optim.min_lr_ratio=2", "optim.min_lr_ratio", "2", "less than or equal to 1"),
    ("trainer.max_steps=0", "trainer.max_steps", "0", "greater than or equal to 1"),
    ("trainer.ppo_epochs=0", "trainer.ppo_epochs", "0", "greater than or equal to 1"),
    ("trainer.logprob_impl=fast", "trainer.logprob_impl", "'fast'", "'fused' or 'naive'"),
    ("trainer.trackers=[tensorbaord]", "trainer.trackers[0]", "'tensorbaord'", "'tensorboard', 'wandb', 'mlflow' or 'trackio'"),
    ("trainer.trackers=wandb", "trainer.trackers", "'wandb'", "valid list"),
    ("algorithm.preset=grpo2", "algorithm.preset", "'grpo2'", "'grpo', 'dr_grpo', 'ppo', 'rloo', 'reinforce_plus_plus', 'gspo' or 'cispo'"),
    ("algorithm.advantage_estimator=ppo", "algorithm.advantage_estimator", "'ppo'", "'gae'"),
    ("algorithm.policy_loss=dpo", "algorithm.policy_loss", "'dpo'", "'gspo'"),
    ("algorithm.kl_estimator=k4", "algorithm.kl_estimator", "'k4'", "'k1', 'k2', 'k3' or 'abs'"),
    ("algorithm.loss_agg_mode=mean", "algorithm.loss_agg_mode", "'mean'", "'token-mean'"),
    ("algorithm.reward_norm_mean=global", "algorithm.reward_norm_mean", "'global'", "'batch', 'group', 'running' or 'none'"),
    ("model.dtype=fp16", "model.dtype", "'fp16'", "'float16'"),
    ("model.lora.target_modules=5", "model.lora.target_modules", "5", "valid string"),
    ("rewards=[{name: math, weight: .nan}]", "rewards[0].weight", "nan", "NaN"),
    ("rewards=[{name: math, timeout_s: 0}]", "rewards[0].timeout_s", "0", "greater than 0"),
    ("rewards=[{weight: 1}]", "rewards[0].name", "", "required"),
    ("rewards=[math]", "rewards[0]", "'math'", "{name: math}"),
    ("algorithm=ppo", "algorithm", "'ppo'", "algorithm.preset=ppo"),
    ("eval.temperature=0", "eval.temperature", "0", "greater than 0"),
]


@pytest.mark.parametrize(("override", "field", "shown", "valid"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_a_bad_value_is_a_config_error_naming_field_value_and_valid_range(override, field, shown, valid):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    message = str(info.value)
    assert "\n" not in message
    assert field in message
    if shown:
        assert f"{field} = {shown}" in message
    assert valid in message


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["algorithm.difficulty_low=0.9", "algorithm.difficulty_high=0.5"], ("difficulty_low (0.9)", "difficulty_high (0.5)")),
        (["algorithm.difficulty_low=0.5", "algorithm.difficulty_high=0.5"], ("difficulty_low (0.5)", "<")),
        (["demo.min_len=7"], ("min_len (7)", "max_len (6)")),
        (["demo.hidden_size=30", "demo.n_heads=4"], ("hidden_size (30)", "n_heads (4)")),
        (["data.train_path=x.jsonl"], ("model.name_or_path", "data.train_path")),
        (["algorithm.preset=ppo", "model.lora.enabled=true", "model.name_or_path=m"], ("gae", "model.lora.enabled")),
    ],
    ids=["difficulty low > high", "difficulty low == high", "demo lengths", "demo heads", "data without a model",
         "critic with lora"],
)
def test_an_inconsistent_pair_of_values_is_a_config_error_naming_both(overrides, words):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    for word in words:
        assert word in str(info.value)


# --- no input crashes the loader -------------------------------------------------------------

yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True)
    | st.text(max_size=8) | st.sampled_from(["grpo", "ppo", "k3", "token-mean", "1e-6", "auto", "[", "{"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)


@given(path=st.sampled_from(_all_paths(Config)), value=yaml_values)
def test_any_value_for_any_key_either_loads_or_is_a_one_line_config_error(path, value):
    """Never a raw pydantic / Python exception, whatever a YAML file holds."""
    raw: dict = {}
    node = raw
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "cfg.yaml"
        file.write_text(yaml.safe_dump(raw))
        try:
            load_config(file)
        except ConfigError as exc:
            assert "\n" not in str(exc)


@given(text=st.text(min_size=1, max_size=40))
def test_any_override_text_either_loads_or_is_a_config_error(text):
    try:
        load_config(None, [text])
    except ConfigError as exc:
        assert str(exc)


def test_a_section_with_nothing_under_it_means_its_defaults(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("model:\n  name_or_path: m\n  lora:\n    # enabled: true\ndata:\n  train_path: t.jsonl\n"
                    "rewards:\ntrainer:\n")
    config = load_config(path)
    assert config.model.lora == Config().model.lora
    assert config.rewards == [] and config.trainer == Config().trainer
    assert config.model.name_or_path == "m"


def test_null_stays_a_value_for_keys_that_are_not_sections():
    with pytest.raises(ConfigError, match=r"optim.lr = None"):
        load_config(None, ["optim.lr=null"])
    assert load_config(None, ["model.tokenizer=null"]).model.tokenizer is None
