"""Load a :class:`Config` from YAML plus dotted ``key=value`` overrides, and explain bad input.

Order: the YAML file (or the built-in demo config when there is none) -> overrides -> the
algorithm preset fills unset keys -> unknown keys are rejected with the nearest valid key ->
pydantic validates types and ranges. Every problem becomes one :class:`ConfigError` naming the
field, the value and what would be valid.
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from .presets import DEMO_CONFIG, apply_preset
from .schema import Config


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
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
        parsed = yaml.safe_load(value) if value.strip() else ""
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


def _suggest(bad: str, valid: list[str]) -> str:
    leaf = bad.rsplit(".", 1)[-1]
    by_leaf = [p for p in valid if p.rsplit(".", 1)[-1] == leaf]
    close = by_leaf or difflib.get_close_matches(bad, valid, n=1, cutoff=0.6)
    if not close:
        close = [p for p in valid if difflib.get_close_matches(leaf, [p.rsplit(".", 1)[-1]], cutoff=0.75)]
    return f"; did you mean {close[0]!r}?" if close else ""


def check_unknown_keys(raw: dict[str, Any], model: type[BaseModel] = Config, prefix: str = "") -> None:
    """Raise ConfigError for the first key that is not a field, suggesting the nearest valid one."""
    valid_all = _all_paths(Config)
    for key, value in raw.items():
        path = f"{prefix}{key}"
        field = model.model_fields.get(key)
        if field is None:
            siblings = [f"{prefix}{name}" for name in model.model_fields]
            hint = _suggest(path, siblings) or _suggest(path, valid_all)
            hint = hint or f"; valid keys here: {', '.join(model.model_fields)}"
            raise ConfigError(f"unknown config key {path!r}{hint}")
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and isinstance(value, dict):
            check_unknown_keys(value, sub, path + ".")
        if key == "rewards" and isinstance(value, list):
            from .schema import RewardConfig

            for i, item in enumerate(value):
                if isinstance(item, dict):
                    check_unknown_keys(item, RewardConfig, f"rewards[{i}].")


def _lookup(raw: Any, loc: tuple) -> Any:
    node = raw
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return "<unset>"
    return node


def _format_validation_error(exc: ValidationError, raw: dict[str, Any]) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
        msg = err["msg"].removeprefix("Value error, ")
        value = _lookup(raw, loc) if loc else None
        if loc and not isinstance(value, (dict, list)):
            lines.append(f"{path} = {value!r}: {msg}")
        elif loc:
            lines.append(f"{path}: {msg}")
        else:
            lines.append(msg)
    return "invalid configuration: " + "; ".join(lines)


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
    raw, preset_keys = apply_preset(raw)
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
    Path(path).write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
