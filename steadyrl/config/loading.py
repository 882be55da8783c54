"""Load a :class:`Config` from YAML plus dotted ``key=value`` overrides, and explain bad input.

Order: the YAML file (or the built-in demo config when there is none) -> overrides -> empty
sections dropped (they mean the defaults) -> the algorithm preset fills unset keys -> unknown
keys are rejected with the nearest valid key -> pydantic validates types and ranges. Every
problem becomes one :class:`ConfigError` naming the field, the value and what would be valid.
"""

from __future__ import annotations

import copy
import difflib
import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from .presets import DEMO_CONFIG, apply_preset
from .schema import Config


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML reads it, plus floats written without a dot (``1e-6``, ``3E-4``,
    ``1.0e6``), which PyYAML leaves as strings: ``optim.lr=1e-6`` is a number, in a file as on
    the command line, also where no schema converts it (a reward's ``options``)."""


class _Dumper(yaml.SafeDumper):
    """Quotes the strings :class:`_Loader` would read as floats (``'1e-6'``), so they load back
    as strings."""


_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))


def yaml_load(text: str) -> Any:
    """``yaml.safe_load`` with :class:`_Loader`'s floats."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def yaml_dump(data: Any, **kwargs: Any) -> str:
    """``yaml.safe_dump`` whose output :func:`yaml_load` reads back to ``data``."""
    return yaml.dump(data, Dumper=_Dumper, **kwargs)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: where and what (PyYAML's own message spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    what = "; ".join(p for p in parts if p) or str(exc).strip().splitlines()[0]
    return f"{where}: {what}"


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        what = "is a directory, not a YAML file" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {str(path)!r} {what}")
    try:
        data = yaml_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML{_yaml_problem(exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections, got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``'algorithm.pg_clip=0.1'`` -> ``(['algorithm', 'pg_clip'], 0.1)``; values are YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} must look like section.key=value")
    try:
        parsed = yaml_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return key.strip().split("."), parsed


def set_dotted(raw: dict[str, Any], keys: list[str], value: Any) -> None:
    node = raw
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {'.'.join(keys)}: {'.'.join(keys[: i + 1])} is not a section")
        node = child
    node[keys[-1]] = value


def _all_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            paths.extend(_all_paths(sub, path + "."))
    return paths


# Names other trainers use (TRL's GRPOConfig, verl's ppo_trainer.yaml) for steadyrl keys, so a
# migrating user's ``trainer.learning_rate`` is answered with ``optim.lr``. See docs/migrating.md.
KNOWN_ALIASES: dict[str, str] = {
    "learning_rate": "optim.lr",
    "num_generations": "rollout.group_size",
    "n": "rollout.group_size",
    "max_completion_length": "rollout.max_new_tokens",
    "response_length": "rollout.max_new_tokens",
    "max_prompt_length": "data.max_prompt_tokens",
    "prompt_length": "data.max_prompt_tokens",
    "beta": "algorithm.kl_coef",
    "kl_loss_coef": "algorithm.kl_coef",
    "kl_coeff": "algorithm.kl_coef",
    "kl_loss_type": "algorithm.kl_estimator",
    "kl_penalty": "algorithm.kl_estimator",
    "epsilon": "algorithm.pg_clip",
    "clip_ratio": "algorithm.pg_clip",
    "cliprange": "algorithm.pg_clip",
    "epsilon_low": "algorithm.pg_clip_low",
    "clip_ratio_low": "algorithm.pg_clip_low",
    "epsilon_high": "algorithm.pg_clip_high",
    "clip_ratio_high": "algorithm.pg_clip_high",
    "clip_ratio_c": "algorithm.dual_clip_c",
    "cliprange_value": "algorithm.value_clip",
    "loss_type": "algorithm.loss_agg_mode",
    "adv_estimator": "algorithm.advantage_estimator",
    "norm_adv_by_std_in_grpo": "algorithm.norm_by_std",
    "scale_rewards": "algorithm.norm_by_std",
    "mask_truncated_completions": "algorithm.mask_truncated",
    "entropy_coeff": "algorithm.entropy_coef",
    "lambd": "algorithm.lam",
    "num_iterations": "trainer.ppo_epochs",
    "ppo_mini_batch_size": "trainer.mini_batch_size",
    "ppo_micro_batch_size_per_gpu": "trainer.micro_batch_size",
    "per_device_train_batch_size": "trainer.micro_batch_size",
    "train_batch_size": "rollout.prompts_per_step",
    "grad_clip": "optim.max_grad_norm",
    "lr_scheduler_type": "optim.schedule",
    "save_steps": "trainer.save_every",
    "eval_steps": "trainer.eval_every",
    "report_to": "trainer.trackers",
    "model_name_or_path": "model.name_or_path",
    "reward_funcs": "rewards",
    "rank": "model.lora.r",
    "lora_rank": "model.lora.r",
    "lora_r": "model.lora.r",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
}


def _leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _suggest(bad: str, siblings: list[str], everywhere: list[str]) -> str:
    """The nearest valid key to ``bad``, as a hint, or ``""``.

    In order: the same name in another section (``trainer.lr`` -> ``optim.lr``); the name other
    trainers use for a key (``learning_rate`` -> ``optim.lr``); a close name in the same section
    (``trainer.max_step`` -> ``trainer.max_steps``); a close name anywhere. Names are compared
    without their section: the shared prefix would make every sibling look close.
    """
    leaf = _leaf(bad)
    same = [p for p in everywhere if _leaf(p) == leaf]
    if same:
        return f"; did you mean {same[0]!r}?"
    alias = KNOWN_ALIASES.get(leaf.lower()) if everywhere else None
    if alias:
        return f"; did you mean {alias!r}?"
    for pool, cutoff in ((siblings, 0.6), (everywhere, 0.75)):
        leaves = [_leaf(p) for p in pool]
        close = difflib.get_close_matches(leaf, leaves, n=1, cutoff=cutoff)
        if close:
            return f"; did you mean {pool[leaves.index(close[0])]!r}?"
    return ""


def check_unknown_keys(raw: dict[str, Any], model: type[BaseModel] = Config, prefix: str = "") -> None:
    """Raise ConfigError for the first key that is not a field, suggesting the nearest valid one."""
    from .schema import RewardConfig

    # a reward's keys are suggested only among a reward's keys
    everywhere = [] if model is RewardConfig else _all_paths(Config)
    for key, value in raw.items():
        path = f"{prefix}{key}"
        field = model.model_fields.get(key)
        if field is None:
            siblings = [f"{prefix}{name}" for name in model.model_fields]
            hint = _suggest(str(path), siblings, everywhere)
            hint = hint or f"; valid keys here: {', '.join(model.model_fields)}"
            raise ConfigError(f"unknown config key {path!r}{hint}")
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and isinstance(value, dict):
            check_unknown_keys(value, sub, path + ".")
        if key == "rewards" and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    check_unknown_keys(item, RewardConfig, f"rewards[{i}].")


_UNSET = object()


def _lookup(raw: Any, loc: tuple) -> Any:
    node = raw
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return _UNSET
    return node


def _section_of(annotation: Any) -> Any:
    """The model a field holds (``LoraConfig``), ``("list", model)`` for ``list[RewardConfig]``,
    or None for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return ("list", args[0])
    return None


def _clean_loc(loc: tuple, raw: dict[str, Any]) -> tuple:
    """pydantic's error location without its union-member tags: ``target_modules.list[str].0``
    -> ``target_modules.0`` (a tag is a name that is neither a field nor a key of the input)."""
    out: list = []
    section: Any = Config
    for part in loc:
        node = _lookup(raw, tuple(out))
        if isinstance(part, int):
            out.append(part)
            section = section[1] if isinstance(section, tuple) else None
        elif isinstance(section, type) and part in section.model_fields:
            out.append(part)
            section = _section_of(section.model_fields[part].annotation)
        elif section is None and isinstance(node, dict) and part in node:
            out.append(part)
    return tuple(out)


def _path(loc: tuple) -> str:
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")


def _message(err: dict, loc: tuple, raw: dict[str, Any]) -> str:
    msg = re.sub(r"a valid dictionary or instance of \w+", "a section (a mapping of keys)",
                 err["msg"].removeprefix("Value error, "))
    if loc == ("algorithm",) and isinstance(raw.get("algorithm"), str):
        msg += f"; to choose a preset write algorithm.preset={raw['algorithm']}"
    value = _lookup(raw, loc)
    if len(loc) == 2 and loc[0] == "rewards" and isinstance(value, str):
        msg += f"; write a reward as {{name: {value}}}"
    return msg


def _format_validation_error(exc: ValidationError, raw: dict[str, Any]) -> str:
    """One line naming each bad field, its value and what would be valid."""
    by_path: dict[tuple, list[str]] = {}
    for err in exc.errors():
        loc = _clean_loc(tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))), raw)
        messages = by_path.setdefault(loc, [])
        msg = _message(err, loc, raw)
        if err["type"] == "missing":
            msg = "required, but not set"
        if msg not in messages:
            messages.append(msg)
    lines = []
    for loc, messages in by_path.items():
        msg = " or ".join(messages)
        value = _lookup(raw, loc) if loc else None
        if not loc:
            lines.append(msg)
        elif value is _UNSET or isinstance(value, (dict, list)):
            lines.append(f"{_path(loc)}: {msg}")
        else:
            lines.append(f"{_path(loc)} = {value!r}: {msg}")
    return "invalid configuration: " + "; ".join(lines)


def _drop_empty_sections(raw: dict[str, Any], model: type[BaseModel] = Config) -> dict[str, Any]:
    """A section (or the rewards list) written with nothing under it (``lora:`` with its keys
    commented out) is YAML null: it means the defaults, as a missing section does."""
    out = {}
    for key, value in raw.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        section = _section_of(field.annotation) if field is not None else None
        if value is None and section is not None:
            continue
        if isinstance(section, type) and isinstance(value, dict):
            value = _drop_empty_sections(value, section)
        out[key] = value
    return out


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, *, with_sources: bool = False
):
    """Build a validated :class:`Config`.

    ``path=None`` starts from the built-in demo config. Returns the config, or with
    ``with_sources=True`` a pair ``(config, preset_keys)`` naming the keys a preset filled.
    """
    raw = read_yaml(path) if path is not None else copy.deepcopy(DEMO_CONFIG)
    for text in overrides or []:
        keys, value = parse_override(text)
        set_dotted(raw, keys, value)
    raw, preset_keys = apply_preset(_drop_empty_sections(raw))
    check_unknown_keys(raw)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, raw)) from None
    return (config, preset_keys) if with_sources else config


def config_to_dict(config: Config) -> dict[str, Any]:
    """Plain data (YAML/JSON-ready) of a config."""
    return config.model_dump(mode="json")


def save_config(config: Config, path: str | Path) -> None:
    Path(path).write_text(yaml_dump(config_to_dict(config), sort_keys=False, allow_unicode=True), encoding="utf-8")
