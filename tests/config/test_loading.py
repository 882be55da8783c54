"""Loading a config: YAML files, dotted overrides parsed as YAML, unknown keys with the nearest
valid key, and bad values reported as one ConfigError naming the field, the value and what
would be valid."""

from __future__ import annotations

import copy
import math
import re
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from steadyrl.config import DEMO_CONFIG, Config, load_config, parse_override
from steadyrl.config.loading import _all_paths
from steadyrl.config.schema import RewardConfig
from steadyrl.errors import ConfigError
from steadyrl.functional.advantages import ADVANTAGE_ESTIMATORS

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
    path.write_text("optim: {lr: 1e-6}\nrewards:\n  - {name: my_rewards:shaped, options: {scale: 5e-3}}\n")
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
    else:  # "did you mean 'optim.lr'?", or for another trainer's name "(TRL's name): use 'optim.lr'"
        assert f"did you mean {suggestion!r}" in message or f"name): use {suggestion!r}" in message


def test_an_unknown_key_in_a_yaml_file_is_reported_with_its_path(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("model:\n  lora:\n    enabled: true\n    alpah: 16\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'model.lora.alpah'; did you mean 'model.lora.alpha'"):
        load_config(path)


TRL_STYLE = """\
learning_rate: 1.0e-6
num_generations: 8
trainer:
  max_step: 3
  micro_batch_size: 0
rollout:
  max_completion_length: 64
rewards:
  - name: math
    wieght: 2
"""


def test_every_unknown_and_invalid_key_of_a_config_is_reported_at_once(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(TRL_STYLE)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [  # each line as it reads when it is the only problem
        "unknown config key 'learning_rate' (TRL's name): use 'optim.lr'",
        "unknown config key 'num_generations' (TRL's name): use 'rollout.group_size'",
        "unknown config key 'trainer.max_step'; did you mean 'trainer.max_steps'?",
        "unknown config key 'rollout.max_completion_length' (TRL's name): use 'rollout.max_new_tokens'",
        "unknown config key 'rewards[0].wieght'; did you mean 'rewards[0].weight'?",
        "invalid configuration: trainer.micro_batch_size = 0: Input should be greater than or equal to 1",
    ]


def test_several_invalid_values_are_one_problem_each_not_one_line_joined_by_semicolons():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["rollout.group_size=four", "algorithm.lam=1.5", "optim.betas=[1.5, 0.999]"])
    assert info.value.problems == [
        "invalid configuration: rollout.group_size = 'four': Input should be a valid integer, unable to parse "
        "string as an integer",
        "invalid configuration: algorithm.lam = 1.5: Input should be less than or equal to 1",
        "invalid configuration: optim.betas[0] = 1.5: Input should be less than 1",
    ]
    assert str(info.value).splitlines() == info.value.problems


def test_a_single_problem_is_a_plain_config_error_with_its_one_line():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["trainer.max_step=3"])
    assert not hasattr(info.value, "problems")
    assert str(info.value) == "unknown config key 'trainer.max_step'; did you mean 'trainer.max_steps'?"


def test_every_suggestion_is_a_valid_key():
    from steadyrl.config.foreign import FOREIGN_NAMES

    paths = set(_all_paths(Config)) | {f"rewards[].{name}" for name in RewardConfig.model_fields}
    for name, (_, advice) in FOREIGN_NAMES.items():
        named = re.findall(r"\b(?:[a-z_]+(?:\[\])?\.)+[a-z_]+\b", advice.split(" (")[0])
        assert named or advice.startswith(("the --", "nothing:")), name
        assert set(named) <= paths, (name, advice)


def test_a_foreign_name_is_never_a_steadyrl_key_or_shadows_one():
    """A name in the table that is also a valid path would never be looked up; one whose last
    word is a steadyrl key's would hide the "same name in another section" hint."""
    from steadyrl.config.foreign import FOREIGN_NAMES

    paths = set(_all_paths(Config))
    leaves = {p.rsplit(".", 1)[-1] for p in paths}
    assert not set(FOREIGN_NAMES) & paths
    shadowing = {name for name in FOREIGN_NAMES if "." not in name and name in leaves}
    assert shadowing == {"generation_batch_size"}  # its advice names both keys


@pytest.mark.parametrize(
    ("override", "bad", "advice"),
    [
        ("trainer.total_epochs=1", "trainer.total_epochs", "(verl's name): use 'trainer.max_epochs'"),
        ("critic.cliprange_value=0.5", "critic.cliprange_value", "use 'algorithm.value_clip'"),
        ("algorithm.kl_ctrl.kl_coef=0.1", "algorithm.kl_ctrl.kl_coef", "use 'algorithm.kl_coef'"),
        ("algorithm.kl_ctrl.target_kl=0.1", "algorithm.kl_ctrl.target_kl", "use 'algorithm.kl_target'"),
        ("model.path=Qwen/Qwen2.5-0.5B", "model.path", "use 'model.name_or_path'"),
        ("actor_rollout_ref.model.path=q", "actor_rollout_ref.model.path", "use 'model.name_or_path'"),
        ("critic.model.path=q", "critic.model.path", "use 'model.critic_name_or_path'"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size",
         "use 'trainer.mini_batch_size'"),
        ("actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.actor.optim.lr", "use 'optim.lr'"),
        ("critic.optim.lr=1e-5", "critic.optim.lr", "use 'optim.critic_lr'"),
        ("actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.name", "use 'rollout.engine'"),
        ("data.train_files=t.parquet", "data.train_files", "use 'data.train_path'"),
        ("data.max_response_length=512", "data.max_response_length", "use 'rollout.max_new_tokens'"),
        ("trainer.total_training_steps=9", "trainer.total_training_steps", "use 'trainer.max_steps'"),
        ("trainer.test_freq=5", "trainer.test_freq", "use 'trainer.eval_every'"),
        ("trainer.logger=[console]", "trainer.logger", "use 'trainer.trackers'"),
        ("trainer.default_local_dir=ckpt", "trainer.default_local_dir", "the --output-dir flag"),
        ("algorithm.use_kl_in_reward=true", "algorithm.use_kl_in_reward", "use algorithm.kl_mode=reward"),
        ("trainer.gradient_accumulation_steps=4", "trainer.gradient_accumulation_steps",
         "use 'trainer.mini_batch_size'"),
        ("optim.adam_beta1=0.9", "optim.adam_beta1", "(TRL's name): use 'optim.betas'"),
        ("optim.adam_epsilon=1e-8", "optim.adam_epsilon", "use 'optim.eps'"),
        ("model.bf16=true", "model.bf16", "use model.dtype=auto (float32 weights computed in bfloat16"),
        ("rollout.use_vllm=true", "rollout.use_vllm", "use rollout.engine=vllm"),
        ("algorithm.delta=4", "algorithm.delta", "algorithm.dual_clip_c"),
        ("algorithm.importance_sampling_level=sequence", "algorithm.importance_sampling_level",
         "use 'algorithm.policy_loss'"),
        ("data.shuffle_dataset=false", "data.shuffle_dataset", "use 'data.shuffle'"),
        ("output_dir=runs/x", "output_dir", "the --output-dir flag"),
        ("reward_weights=[1, 2]", "reward_weights", "use 'rewards[].weight'"),
        # a section of another trainer's config: the key under it is what gets matched
        ("actor.loss_agg_mode=token-mean", "actor.loss_agg_mode", "did you mean 'algorithm.loss_agg_mode'"),
        ("trainr.max_steps=3", "trainr.max_steps", "did you mean 'trainer.max_steps'"),
    ],
)
def test_another_trainers_name_points_to_the_steadyrl_key(override, bad, advice):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    message = str(info.value)
    assert f"unknown config key {bad!r}" in message and advice in message, message


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
    ("trainer.logprob_impl=fast", "trainer.logprob_impl", "'fast'", "'fused', 'naive' or 'chunked_grad'"),
    ("trainer.trackers=[tensorbaord]", "trainer.trackers[0]", "'tensorbaord'", "'tensorboard', 'wandb', 'mlflow' or 'trackio'"),
    ("trainer.trackers=wand", "trainer.trackers[0]", "'wand'", "'tensorboard', 'wandb', 'mlflow' or 'trackio'"),  # one name: a list of one
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
    # a boolean is not a number (pydantic alone reads true as 1, false as 0)
    ("rollout.group_size=true", "rollout.group_size", "True", "a boolean is not a number; valid: an integer >= 1"),
    ("optim.lr=true", "optim.lr", "True", "valid: a number > 0"),
    ("trainer.save_every=false", "trainer.save_every", "False", "valid: an integer >= 0"),
    ("trainer.seed=true", "trainer.seed", "True", "valid: an integer"),
    ("trainer.max_epochs=true", "trainer.max_epochs", "True", "valid: a number > 0 or null"),
    ("algorithm.pg_clip_low=false", "algorithm.pg_clip_low", "False", "a number >= 0 and <= 1 or null"),
    ("optim.min_lr_ratio=true", "optim.min_lr_ratio", "True", "a number >= 0 and <= 1"),
    ("optim.betas=[true, 0.999]", "optim.betas", "", "a boolean is not a number; valid: a number >= 0 and < 1"),
    ("rewards=[{name: math, weight: true}]", "rewards[0].weight", "True", "a boolean is not a number"),
    ("rollout.tis_cap=true", "rollout.tis_cap", "True", "a boolean is not a number"),
    # a clip range above 1 makes the lower ratio bound 1 - clip negative
    ("algorithm.pg_clip_low=1.5", "algorithm.pg_clip_low", "1.5", "less than or equal to 1"),
    ("algorithm.pg_clip=1.2", "algorithm.pg_clip", "1.2", "less than or equal to 1"),
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
        (["rewards=[{name: regex_format, options: {pattern: a}}, {name: regex_format, options: {pattern: b}}]"],
         ("rewards[0] and rewards[1]", "'regex_format'", "unique", "set rewards[i].label to tell them apart")),
        (["rewards=[{name: a.py:score}, {name: b.py:score}]"], ("'score'", "rewards[i].label")),
        (["rewards=[{name: math}, {name: exact_match, label: math}]"], ("'math'", "rewards[i].label")),
    ],
    ids=["difficulty low > high", "difficulty low == high", "demo lengths", "demo heads", "data without a model",
         "critic with lora", "one reward twice", "two functions of one name", "a label taken by a name"],
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
        except ConfigError as exc:  # one line per problem (several problems are reported at once)
            problems = getattr(exc, "problems", [str(exc)])
            assert str(exc).splitlines() == problems and all("\n" not in p and p.strip() for p in problems)


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


# --- groups of one ----------------------------------------------------------------------------


GROUPED = sorted(name for name, est in ADVANTAGE_ESTIMATORS.items() if est.grouped)


def test_the_grouped_estimators_are_the_ones_that_compare_a_group():
    assert GROUPED == ["grpo", "grpo_passk", "opo", "reinforce_plus_plus_baseline", "rloo"]


@pytest.mark.parametrize("estimator", GROUPED)
def test_a_group_of_one_with_a_group_based_estimator_is_a_config_error(estimator):
    """Every advantage would be 0: the run would train for hours and learn nothing."""
    with pytest.raises(ConfigError) as info:
        load_config(None, ["rollout.group_size=1", f"algorithm.advantage_estimator={estimator}"])
    message = str(info.value)
    for words in ("rollout.group_size = 1", repr(estimator), "needs rollout.group_size >= 2"):
        assert words in message


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "rloo", "gspo", "cispo"])
def test_a_group_of_one_is_refused_for_the_presets_that_compare_a_group(preset):
    with pytest.raises(ConfigError, match="rollout.group_size >= 2"):
        load_config(None, ["rollout.group_size=1", f"algorithm.preset={preset}"])


@pytest.mark.parametrize("preset", ["ppo", "reinforce_plus_plus"])
def test_a_group_of_one_is_fine_without_a_group_baseline(preset):
    assert load_config(None, ["rollout.group_size=1", f"algorithm.preset={preset}"]).rollout.group_size == 1


def test_every_preset_and_the_demo_load_with_their_default_group_size():
    from steadyrl.config import ALGORITHM_PRESETS

    for preset in ALGORITHM_PRESETS:
        load_config(None, [f"algorithm.preset={preset}"])
        assert Config(algorithm={"preset": preset}).rollout.group_size >= 2


# --- numbers: booleans refused, the rest unchanged ----------------------------------------------


@pytest.mark.parametrize(("override", "expected"), [
    ("rollout.group_size=2", 2), ("optim.lr=1", 1.0), ("trainer.save_every=0", 0), ("trainer.max_epochs=0.5", 0.5),
    ("algorithm.pg_clip_low=1", 1.0), ("algorithm.pg_clip_low=null", None), ("optim.max_grad_norm=.inf", math.inf),
])
def test_numbers_still_load(override, expected):
    keys, _ = parse_override(override)
    config = load_config(None, [override])
    value = getattr(getattr(config, keys[0]), keys[1])
    assert value == expected and not isinstance(value, bool)


def test_numbers_written_as_strings_in_a_file_still_load(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("rollout: {group_size: '4'}\noptim: {lr: '3e-6'}\n")
    config = load_config(path)
    assert config.rollout.group_size == 4 and config.optim.lr == 3e-6


def test_a_boolean_is_refused_on_assignment_too():
    config = Config()
    with pytest.raises(ValueError, match="a boolean is not a number"):
        config.rollout.group_size = True


def test_booleans_still_load_where_a_boolean_belongs():
    config = load_config(None, ["algorithm.dual_clip=true", "data.chat_template=false", "model.lora.enabled=yes",
                                "model.name_or_path=m", "data.train_path=t.jsonl"])
    assert config.algorithm.dual_clip is True and config.data.chat_template is False
    assert config.model.lora.enabled is True


def test_the_cispo_preset_keeps_its_clip_low_of_one():
    assert load_config(None, ["algorithm.preset=cispo"]).algorithm.clip_low == 1.0


# --- text fields keep the text typed on the command line --------------------------------------


@pytest.mark.parametrize(("override", "expected"), [
    ("model.revision=0123", "0123"),  # YAML 1.1: octal 83
    ("model.revision=0x1F", "0x1F"),
    ("model.revision=1_000", "1_000"),
    ("model.revision=2024-01-01", "2024-01-01"),  # YAML 1.1: a date
    ("model.revision=12:30", "12:30"),  # YAML 1.1: sexagesimal 750
    ("model.revision=v1.0", "v1.0"),
    ("model.revision='0123'", "0123"),  # quotes keep their meaning
    ("model.revision=null", None),  # and so does null where null is valid
    ("data.prompt_key=yes", "yes"),  # YAML 1.1: true
    ("data.answer_key=off", "off"),
    ("data.prompt_key=1e-6", "1e-6"),
    ("data.prompt_key= 7 ", "7"),
    ("trainer.run_name=2024", "2024"),
    ("eval.accuracy_reward=true", "true"),
])
def test_a_text_field_keeps_the_text_typed(override, expected):
    keys, value = parse_override(override)
    assert value == expected and type(value) is type(expected)


def test_text_overrides_load_as_typed():
    config = load_config(None, ["model.revision=0123", "data.prompt_key=yes", "trainer.project=007",
                                "model.name_or_path=m", "data.train_path=2024-01-01"])
    assert config.model.revision == "0123" and config.data.prompt_key == "yes"
    assert config.trainer.project == "007" and config.data.train_path == "2024-01-01"


@pytest.mark.parametrize(("override", "expected"), [
    ("model.lora.target_modules=5", 5),  # str | list[str]: still YAML, and refused as not a string
    ("data.prompt_key=[a, b]", ["a", "b"]),  # a list stays a list, refused as not a string
    ("rollout.group_size=0123", 83),  # numbers keep YAML's reading
    ("model.lora.enabled=yes", True),
])
def test_other_fields_keep_the_yaml_value(override, expected):
    assert parse_override(override)[1] == expected


def test_a_number_for_a_text_field_in_a_file_says_to_quote_it(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("model: {revision: 0123}\n")
    with pytest.raises(ConfigError, match=r"model.revision = 83: .*valid string.*quote it"):
        load_config(path)
    path.write_text("model: {revision: '0123'}\n")
    assert load_config(path).model.revision == "0123"


def test_a_clip_above_one_says_why():
    with pytest.raises(ConfigError, match=r"pg_clip_low = 1.5: .*less than or equal to 1 .*1 = no lower bound"):
        load_config(None, ["algorithm.pg_clip_low=1.5"])


def test_a_list_for_a_text_field_is_still_an_error():
    with pytest.raises(ConfigError, match="data.prompt_key.*valid string"):
        load_config(None, ["data.prompt_key=[a, b]"])


# --- duplicate keys ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "key", "lines"), [
    ("optim:\n  lr: 1.0e-6\n  eps: 1.0e-8\n  lr: 3.0e-6\n", "lr", "lines 2 and 4"),
    ("optim: {lr: 1.0e-6}\ntrainer: {max_steps: 3}\noptim: {eps: 1.0e-8}\n", "optim", "lines 1 and 3"),
    ("rewards:\n  - {name: math, weight: 1, weight: 2}\n", "weight", "(line 2)"),
])
def test_a_key_written_twice_in_a_file_is_a_config_error(tmp_path, text, key, lines):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and f"key {key!r} twice" in message and lines in message
    assert "\n" not in message


def test_the_same_key_in_two_sections_and_yaml_merge_keys_are_fine(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("rollout: {temperature: 0.7}\neval: {temperature: 0.5}\n"
                    "base: &base {name: math, weight: 1}\n")
    with pytest.raises(ConfigError, match="unknown config key 'base'"):  # parsed fine, then refused as a key
        load_config(path)
    path.write_text("rewards:\n  - &m {name: math, weight: 1}\n  - {<<: *m, name: exact_match, weight: 2}\n")
    config = load_config(path)
    assert [(r.name, r.weight) for r in config.rewards] == [("math", 1.0), ("exact_match", 2.0)]


def test_a_key_written_twice_in_an_override_is_a_config_error():
    with pytest.raises(ConfigError, match="'name' twice"):
        load_config(None, ["rewards=[{name: math, name: exact_match}]"])


# --- reward labels ----------------------------------------------------------------------------


def test_a_label_tells_two_rewards_of_one_name_apart():
    config = load_config(None, [
        "rewards=[{name: regex_format, options: {pattern: a}}, {name: regex_format, label: fmt_b, "
        "options: {pattern: b}, weight: 0.5}]",
    ])
    assert [r.key for r in config.rewards] == ["regex_format", "fmt_b"]
    assert [r.label for r in config.rewards] == [None, "fmt_b"]


@pytest.mark.parametrize("spec", ["math", " math ", "pkg.module:score", "path/to/file.py:score", "a/b.py:Cls.method",
                                  "regex_format"])
def test_a_rewards_key_without_a_label_is_the_name_it_was_always_logged_under(spec):
    from steadyrl.rewards import reward_name

    assert RewardConfig(name=spec).key == reward_name(spec)


@pytest.mark.parametrize("label", ["", "  ", "a/b"])
def test_a_label_must_be_a_metric_name(label):
    with pytest.raises(ConfigError, match="rewards\\[0\\].label.*without '/'"):
        load_config(None, [f"rewards=[{{name: math, label: '{label}'}}]"])


# --- a choice of names (Literal) keeps the name typed; a lone tracker is a list of one -----------


@pytest.mark.parametrize(("override", "expected"), [
    ("algorithm.kl_mode=off", "off"),  # YAML 1.1: false
    ("rollout.engine=yes", "yes"),
    ("data.format=null", None),  # Literal[...] | None: null keeps its meaning
    ("algorithm.kl_mode=none", "none"),
])
def test_a_choice_field_keeps_the_name_typed(override, expected):
    assert parse_override(override)[1] == expected


def test_a_yaml_boolean_for_a_choice_is_reported_as_typed():
    with pytest.raises(ConfigError, match=r"algorithm.kl_mode = 'off': Input should be 'none', 'loss' or 'reward'"):
        load_config(None, ["algorithm.kl_mode=off"])


def test_a_yaml_boolean_for_a_choice_in_a_file_says_to_quote_it(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("algorithm:\n  kl_mode: off\n")
    with pytest.raises(ConfigError, match=r"algorithm.kl_mode = False: .*'reward' \(YAML reads .*off as booleans"):
        load_config(path)


def test_one_tracker_name_is_a_list_of_one(tmp_path):
    assert load_config(None, ["trainer.trackers=tensorboard"]).trainer.trackers == ["tensorboard"]
    path = tmp_path / "cfg.yaml"
    path.write_text("trainer:\n  trackers: tensorboard\n")
    assert load_config(path).trainer.trackers == ["tensorboard"]
    with pytest.raises(ConfigError, match=r"trainer.trackers\[0\] = 'wand': Input should be 'tensorboard', 'wandb'"):
        load_config(None, ["trainer.trackers=wand"])


@pytest.mark.parametrize(("override", "line"), [
    ("rewards=[{name: math}, {name: http, options: {url: 'ftp://rm/score'}}]",
     "rewards[1].options.url = 'ftp://rm/score': its scheme is 'ftp', not http or https"),
    ("rewards=[{name: llm_judge, options: {model: j, base_url: 'judge:8000/v1'}}]",
     "rewards[0].options.base_url = 'judge:8000/v1': its scheme is 'judge', not http or https"),
    ("rewards=[{name: code, options: {backend: http, url: 'https://:8080'}}]",
     "rewards[0].options.url = 'https://:8080': no host"),
])
def test_a_reward_server_url_is_checked_with_the_config(override, line):
    # read with the config (steadyrl config show refuses it too), check_url or not, no server needed
    with pytest.raises(ConfigError) as err:
        load_config(None, [override.replace("}}]", ", check_url: false}}]")])
    assert str(err.value) == f"invalid configuration: {line}; valid: an http:// or https:// URL with a host, " \
                             "e.g. http://localhost:8000"


def test_good_and_environment_reward_urls_pass_the_config_without_a_server():
    config = load_config(None, ["rewards=[{name: http, options: {url: 'http://127.0.0.1:9/score'}}, "
                                "{name: llm_judge, options: {model: j, base_url: {env: JUDGE_URL}}}]"])
    assert config.rewards[1].options["base_url"] == {"env": "JUDGE_URL"}  # checked once the variable is read
