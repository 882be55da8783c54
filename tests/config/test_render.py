"""``render_config`` (what ``steadyrl config show`` prints) and ``save_config`` (a run's
``config.yaml``): valid YAML that loads back to an equal config, every key with its help text,
preset-filled keys marked ``[preset]``."""

from __future__ import annotations

import re
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from steadyrl.config import ALGORITHM_PRESETS, Config, load_config, render_config, save_config
from steadyrl.config.loading import yaml_load
from steadyrl.config.schema import RewardConfig

LINE = re.compile(r"^(?P<pad> *)(?:- *)?(?P<key>\w+):(?P<rest>.*)$")


def _leaf_fields(model: type[BaseModel], prefix: str = ""):
    """``(dotted path, FieldInfo)`` of every field holding a value (sections are walked into)."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaf_fields(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


def _lines_by_path(text: str) -> dict[str, str]:
    out, stack = {}, []  # stack: (indent, key) of the enclosing sections
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            indent = len(m["pad"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, m["key"]))
            out[".".join(key for _, key in stack)] = line
    return out


CONFIGS = {
    "defaults": [],
    "demo": None,
    **{f"preset {name}": [f"algorithm.preset={name}"] for name in ALGORITHM_PRESETS},
    "rewards and lists": [
        "rewards=[{name: math, weight: 2}, {name: 'my_rewards.py:fmt', options: {pattern: '^<think>', n: [1, 2]}}]",
        "model.lora.target_modules=[q_proj, v_proj]", "trainer.trackers=[tensorboard, wandb]",
        "optim.betas=[0.8, 0.95]",
    ],
    "awkward strings": [
        "trainer.run_name='yes'", "trainer.project='1e5'", "model.revision='null'", "data.prompt_key='a: b # c'",
        "data.answer_key=' padded '", "model.tokenizer='~'", "data.split='0x1f'",
    ],
    "special numbers": ["optim.max_grad_norm=.inf", "optim.lr=1e-7", "algorithm.kl_coef=0", "trainer.seed=-1"],
}


def _load(overrides):
    if overrides is None:
        return load_config(None, [], with_sources=True)
    return load_config(None, ["model.name_or_path=m", "data.train_path=t.jsonl", *overrides], with_sources=True)


@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS.keys())
def test_rendered_config_is_yaml_that_loads_back_to_an_equal_config(overrides, tmp_path):
    config, filled = _load(overrides)
    text = render_config(config, filled)
    assert Config.model_validate(yaml_load(text)) == config
    path = tmp_path / "shown.yaml"
    path.write_text(text)
    assert load_config(path) == config  # as a config file: nothing left for a preset to fill


@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS.keys())
def test_saved_config_loads_back_to_an_equal_config(overrides, tmp_path):
    config, _ = _load(overrides)
    save_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config


def test_every_key_is_shown_with_its_help_text():
    config = load_config(None, ["rewards=[{name: math}]"])
    lines = _lines_by_path(render_config(config))
    for path, field in _leaf_fields(Config):
        if path == "rewards":
            continue
        assert path in lines, f"{path} is not shown"
        assert lines[path].endswith(f"# {field.description}"), f"{path}: {lines[path]!r}"
    for name, field in RewardConfig.model_fields.items():
        assert lines[f"rewards.{name}"].endswith(f"# {field.description}"), name
    assert "# " + Config.model_fields["rewards"].description in lines["rewards"]


def test_every_field_has_help_text():
    missing = [path for path, field in _leaf_fields(Config) if not (field.description or "").strip()]
    missing += [f"rewards[].{n}" for n, f in RewardConfig.model_fields.items() if not (f.description or "").strip()]
    assert missing == []


@pytest.mark.parametrize("name", sorted(ALGORITHM_PRESETS))
def test_exactly_the_preset_filled_keys_are_marked(name):
    config, filled = load_config(None, [f"algorithm.preset={name}", "algorithm.pg_clip=0.3"], with_sources=True)
    lines = _lines_by_path(render_config(config, filled))
    marked = {path for path, line in lines.items() if line.endswith("[preset]")}
    assert marked == filled
    demo_explicit = {f"algorithm.{k}" for k in ("kl_mode", "preset", "pg_clip")}
    assert marked == {f"algorithm.{k}" for k in ALGORITHM_PRESETS[name]} - demo_explicit


def test_without_sources_nothing_is_marked():
    assert "[preset]" not in render_config(load_config())


free_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@given(run_name=free_text, project=free_text, prompt_key=free_text.filter(bool))
def test_any_string_value_round_trips_through_the_rendering(run_name, project, prompt_key):
    config = Config()
    config.trainer.run_name = run_name
    config.trainer.project = project
    config.data.prompt_key = prompt_key
    text = render_config(config)
    assert Config.model_validate(yaml_load(text)) == config
    line = _lines_by_path(text)["trainer.run_name"]
    assert line.endswith("# " + Config.model_fields["trainer"].annotation.model_fields["run_name"].description)


@given(value=st.floats(allow_nan=False) | st.integers(-10**9, 10**9))
def test_any_number_round_trips_through_the_rendering(value):
    config = Config()
    config.algorithm.kl_coef = abs(value)
    config.trainer.seed = int(value) if abs(value) < 10**15 else 0
    assert Config.model_validate(yaml_load(render_config(config))) == config


def test_section_values_are_typed_in_the_rendering():
    data = yaml_load(render_config(load_config(None, ["optim.lr=1e-6"])))
    assert isinstance(data["optim"]["lr"], float) and data["optim"]["lr"] == 1e-6
    assert data["optim"]["betas"] == [0.9, 0.999]
    assert isinstance(data["trainer"]["max_steps"], int)
    assert typing.get_args(Config.model_fields["rewards"].annotation)  # list[RewardConfig]


def test_config_show_lists_every_option_of_a_built_in_reward_and_still_loads_back(tmp_path):
    config = load_config(None, ["rewards=[{name: code, options: {workers: 2}}, {name: math}]"])
    text = render_config(config)
    assert "      workers: 2  # Samples run at once." in text
    assert "      # memory_mb: 1024  # Address space" in text  # left at its default: commented out
    assert "    options: {}  # Keyword options" in text and "      # gold_marker: '####'  #" in text
    path = tmp_path / "shown.yaml"
    path.write_text(text)
    assert load_config(path) == config
