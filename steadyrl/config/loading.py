"""Load a :class:`Config` from YAML plus dotted ``key=value`` overrides, and explain bad input.

Order: the YAML file (or the built-in demo config when there is none) -> overrides -> keys
steadyrl renamed moved to their new names (:mod:`.renamed`, with a note each) -> empty
sections dropped (they mean the defaults) -> the algorithm preset fills unset keys -> unknown
keys are rejected with the nearest valid key -> pydantic validates types and ranges. Every
problem becomes one :class:`ConfigError` naming the field, the value and what would be valid.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import difflib
import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from ..errors import ConfigError
from ..files import atomic_write_text
from ..secrets import redact_secrets
from .foreign import foreign_name
from .inert import written_in_file, written_keys
from .presets import DEMO_CONFIG, DEMO_CONFIGS, apply_preset
from .renamed import (RENAMED_KEYS, apply_renames, move_multi_turn, multi_turn_note, new_path, old_names_in,
                      renamed_copy)
from .schema import Config
from .yaml_limits import AliasBombError, NumberTooLongError, check_expansion, check_int_text


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping that names the same key twice (PyYAML would keep the last one, silently)."""

    def __init__(self, key: Any, first: yaml.Mark, again: yaml.Mark) -> None:
        super().__init__(None, None, f"duplicate key {key!r} (first at line {first.line + 1})", again)
        self.key, self.lines = key, (first.line + 1, again.line + 1)


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML reads it, plus floats written without a dot (``1e-6``, ``3E-4``,
    ``1.0e6``), which PyYAML leaves as strings: ``optim.lr=1e-6`` is a number, in a file as on
    the command line, also where no schema converts it (a reward's ``options``). A key written
    twice in one mapping is a :class:`DuplicateKeyError`, not "the last one wins". Aliases that
    expand past ``MAX_YAML_NODES`` values are an :class:`AliasBombError` (:mod:`.yaml_limits`)."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            check_expansion(node)
        return node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        check_int_text(node)  # int() of more than 4,300 digits raises a ValueError, not a YAML error
        return super().construct_yaml_int(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        # before merge keys (``<<: *base``) are flattened in: a key may override a merged one
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise DuplicateKeyError(key, seen[key], key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


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
    return read_yaml_source(path)[0]


def read_yaml_source(path: str | Path) -> tuple[dict[str, Any], str, str]:
    """``(mapping, text, SHA-256 of the bytes)`` of the YAML file ``path``, all from one read."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory, not a YAML file" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {str(path)!r} {what}")
    try:
        source = path.read_bytes()
        text = source.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text reads it
        data = yaml_load(text)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except DuplicateKeyError as exc:
        first, again = exc.lines
        where = f"line {first}" if first == again else f"lines {first} and {again}"
        raise ConfigError(f"config file {str(path)!r} sets the key {exc.key!r} twice in one mapping ({where}); "
                          f"the second would silently replace the first: keep one") from None
    except NumberTooLongError as exc:
        raise ConfigError(f"config file {str(path)!r} refused{_yaml_problem(exc)}") from None
    except AliasBombError as exc:
        raise ConfigError(f"config file {str(path)!r} refused{_yaml_problem(exc)}; write the values out "
                          "instead of nesting aliases (*name)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML{_yaml_problem(exc)}") from None
    except RecursionError:
        raise ConfigError(f"config file {str(path)!r} is nested too deeply to be a config") from None
    digest = hashlib.sha256(source).hexdigest()
    if data is None:
        return {}, text, digest
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections, got {type(data).__name__}")
    return data, text, digest


def parse_override(text: str) -> tuple[list[str], Any]:
    """``'algorithm.pg_clip=0.1'`` -> ``(['algorithm', 'pg_clip'], 0.1)``; values are YAML.

    Except for a text field (``str`` or ``str | None``): there the value is the text as typed,
    where YAML 1.1 would read it as something else (``model.revision=0123`` is ``'0123'``, not
    83; ``data.prompt_key=yes`` is ``'yes'``, not true). Quotes and ``null`` keep their YAML
    meaning, and a list or mapping stays one, to be reported as not a string.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} must look like section.key=value")
    keys = key.strip().split(".")
    try:
        parsed = yaml_load(value) if value.strip() else ""
    except DuplicateKeyError as exc:
        raise ConfigError(f"override {text!r} sets the key {exc.key!r} twice; keep one") from None
    except NumberTooLongError as exc:
        raise ConfigError(f"override {key.strip()}=...: {exc.problem}") from None
    except yaml.YAMLError:
        parsed = value
    if _is_text_field(keys) and not isinstance(parsed, (str, list, dict)) and parsed is not None:
        parsed = value.strip()
    return keys, parsed


def _field_at(keys: list[str]) -> FieldInfo | None:
    """The schema field a dotted path names (``['model', 'revision']``), or None."""
    model: Any = Config
    field = None
    for key in keys:
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or key not in model.model_fields:
            return None
        field = model.model_fields[key]
        model = field.annotation
    return field


def _is_text_field(keys: list[str]) -> bool:
    """A ``str`` field, or a choice of names (``Literal['none', 'loss', 'reward']``, or null): YAML
    would read ``algorithm.kl_mode=off`` as false and then report ``False`` as the bad value."""
    field = _field_at(keys)
    if field is None:
        return False
    if field.annotation in (str, str | None):
        return True
    options = [arg for arg in typing.get_args(field.annotation) if arg is not type(None)]
    if typing.get_origin(field.annotation) is typing.Literal:
        options = [field.annotation]
    return bool(options) and all(
        typing.get_origin(arg) is typing.Literal and all(isinstance(v, str) for v in typing.get_args(arg))
        for arg in options)


def get_dotted(raw: dict[str, Any], keys: list[str]) -> Any:
    """The value at ``keys`` (``['model', 'lora', 'r']``) in a config dict, or None when absent."""
    node: Any = raw
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node


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


def _leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _leaf_paths(path: str, value: Any) -> list[str]:
    """The dotted paths of the values under ``path`` when it holds a mapping (a section of another
    trainer's config, such as verl's ``critic:``), else ``[path]``."""
    if not isinstance(value, dict) or not value:
        return [path]
    return [leaf for key, sub in value.items() for leaf in _leaf_paths(f"{path}.{key}", sub)]


def _unknown_key(path: str, value: Any, siblings: list[str], everywhere: list[str]) -> str:
    """The error for a key that is not a field, with the best hint.

    In order, each tried on the key and then on every key under it (a section of another
    trainer's config): the name another trainer uses for a setting (``trainer.total_epochs`` ->
    use ``trainer.max_epochs``); a steadyrl key it ends with, or the same name in another section
    (``trainer.lr`` -> ``optim.lr``). Then, for the key itself: a close name in the same section
    (``trainer.max_step`` -> ``trainer.max_steps``); a close name anywhere; else the valid keys of
    the section. Names are compared without their section: the shared prefix would make every
    sibling look close.
    """
    candidates = [path] + [p for p in _leaf_paths(path, value) if p != path]
    if everywhere:  # a reward's keys are suggested only among a reward's keys
        for candidate in candidates:
            entry = foreign_name(candidate)
            if entry:
                whose, advice = entry
                # the key it starts with is quoted, as keys are in every other message
                advice = re.sub(r"^([a-z_]+(?:\[\])?(?:\.[a-z_]+)+)(?=$|[ ,])", r"'\1'", advice)
                if whose is None:
                    return f"unknown config key {candidate!r}; did you mean {advice}?"
                return f"unknown config key {candidate!r} ({whose} name): use {advice}"
    for candidate in candidates:
        same = ([p for p in everywhere if candidate.endswith(f".{p}")]  # actor_rollout_ref.rollout.top_p
                or [p for p in everywhere if _leaf(p) == _leaf(candidate)])
        if same:
            return f"unknown config key {candidate!r}; did you mean {same[0]!r}?"
    leaf = _leaf(path)
    renamed = old_names_in(path.rpartition(".")[0])  # a miss of an old name suggests the new one
    for pool, cutoff in ((siblings + list(renamed), 0.6), (everywhere, 0.75)):
        leaves = [_leaf(p) for p in pool]
        close = difflib.get_close_matches(leaf, leaves, n=1, cutoff=cutoff)
        if close:
            meant = pool[leaves.index(close[0])]
            return f"unknown config key {path!r}; did you mean {renamed.get(meant, meant)!r}?"
    return f"unknown config key {path!r}; valid keys here: {', '.join(_leaf(p) for p in siblings)}"


def check_unknown_keys(raw: dict[str, Any], model: type[BaseModel] = Config, prefix: str = "") -> list[str]:
    """One message per key that is not a field, suggesting the nearest valid one; the unknown keys
    are removed from ``raw`` (a caller's copy), so the rest can still be validated and every
    problem of a config is reported at once."""
    from .schema import RewardConfig

    everywhere = [] if model is RewardConfig else _all_paths(Config)
    problems = []
    for key, value in list(raw.items()):
        path = f"{prefix}{key}"
        field = model.model_fields.get(key)
        if field is None:
            siblings = [f"{prefix}{name}" for name in model.model_fields]
            problems.append(_unknown_key(str(path), value, siblings, everywhere))
            del raw[key]
            continue
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and isinstance(value, dict):
            problems += check_unknown_keys(value, sub, path + ".")
        if key == "rewards" and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    problems += check_unknown_keys(item, RewardConfig, f"rewards[{i}].")
    return problems


class ConfigProblems(ConfigError):
    """Several problems in one config, one line each (the command prints each as its own error)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


_UNSET = object()


def _lookup(raw: Any, loc: tuple) -> Any:
    node = raw
    for part in loc:
        if isinstance(node, str) and part == 0:  # one name where a list is expected stands for [name]
            continue
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
    if loc in (("algorithm", "pg_clip"), ("algorithm", "pg_clip_low")) and err["type"] == "less_than_equal":
        msg += " (the ratio's lower bound is 1 - clip; 1 = no lower bound)"
    if err["type"] == "literal_error" and isinstance(value, bool):
        msg += " (YAML reads yes, no, on and off as booleans: quote the name to keep it text)"
    if err["type"] == "string_type" and isinstance(value, (bool, int, float, datetime.date)):
        msg += " (YAML reads 0123, yes, 1e-6 or 2024-01-01 as numbers, booleans or dates: quote it to keep it text)"
    return msg


def _validation_problems(exc: ValidationError, raw: dict[str, Any]) -> list[str]:
    """One line per bad field, naming it, its value and what would be valid (the command prints
    each line as its own error: several on one line were hard to read)."""
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
    return [f"invalid configuration: {line}" for line in lines]


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


def _demo_base(overrides: list[str]) -> dict[str, Any]:
    """The built-in config that the command line starts from: the one of the ``demo.task`` the
    overrides choose (the reverse task when none does or the value is not a task name)."""
    task = "reverse"
    for text in overrides:
        keys, value = parse_override(text)
        if keys == ["demo", "task"] and isinstance(value, str):
            task = value
    return copy.deepcopy(DEMO_CONFIGS.get(task, DEMO_CONFIG))


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, *, with_sources: bool = False,
    demo: bool = True,
):
    """Build a validated :class:`Config`.

    ``path=None`` starts from the built-in demo config (with ``demo=False``: from the defaults
    alone). Returns the config, or with ``with_sources=True`` a pair ``(config, preset_keys)``
    naming the keys a preset filled.
    """
    if path is not None:
        raw, text, digest = read_yaml_source(path)  # one read: what is loaded is what the trust rule judges
        source = (str(path), digest, copy.deepcopy(raw))
        written = written_in_file(text, renamed_copy(raw))  # a file's old key names counted under their new ones
    else:
        raw = _demo_base(overrides or []) if demo else {}
        source = None
        written = set()  # the built-in demo's keys are not the user's
    typed: dict[str, Any] = {}
    parsed = [parse_override(text) for text in overrides or []]
    for keys, value in parsed:
        set_dotted(typed, keys, value)
    written |= written_keys(typed)
    written |= {new for old, new in RENAMED_KEYS.items()  # an old key name typed counts under its new name
                if get_dotted(typed, old.split(".")) is not None}
    # the file's old multi-turn names, then the command line's, each at its new name: an override in either
    # name replaces the file's value in either name (old and new both in the file, or both typed: an error)
    moved = move_multi_turn(raw) + move_multi_turn(copy.deepcopy(typed))
    for keys, value in parsed:
        set_dotted(raw, new_path(keys), value)
    renamed_notes = multi_turn_note(moved) + apply_renames(raw)
    raw, preset_keys = apply_preset(_drop_empty_sections(raw))
    problems = check_unknown_keys(raw)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        problems += _validation_problems(exc, raw)
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigProblems(problems)
    config._renamed_notes = renamed_notes
    config._written = frozenset(written)
    config._source = source
    return (config, preset_keys) if with_sources else config


def config_to_dict(config: Config) -> dict[str, Any]:
    """Plain data (YAML/JSON-ready) of a config."""
    return config.model_dump(mode="json")


def dump_config(config: Config) -> str:
    """``config`` as YAML text, secrets redacted (:mod:`steadyrl.secrets`)."""
    return yaml_dump(redact_secrets(config_to_dict(config)), sort_keys=False, allow_unicode=True)


def save_config(config: Config, path: str | Path) -> None:
    """Write :func:`dump_config` to ``path`` atomically: the old file or the new one, never a cut one."""
    atomic_write_text(path, dump_config(config))
