"""Parsing an adapter spec, ``<adapter>:<target>[?key=value&...]``, and importing its package.

Option values are read as JSON when they parse (``size=200`` is an integer, ``ops=["+","-"]`` a
list, ``flag=true`` a boolean) and kept as text otherwise (``split=test``). A key given twice is
refused, so is an empty key or a missing ``=``.
"""

from __future__ import annotations

import importlib
import json
import typing
from dataclasses import dataclass, field
from urllib.parse import unquote

from ..errors import ConfigError

ADAPTERS = {
    # adapter -> (module to import, pip extra, what the target names)
    "reasoning_gym": ("reasoning_gym", "reasoning-gym", "reasoning-gym task"),
    "textarena": ("textarena", "textarena", "TextArena game id"),
    "openenv": ("openenv.core", "openenv", "OpenEnv server base URL"),
}


@dataclass(frozen=True)
class Spec:
    adapter: str
    target: str
    options: dict = field(default_factory=dict)
    text: str = ""

    def where(self, key: str) -> str:
        """How messages name the spec: ``data.train_path = 'reasoning_gym:chain_sum'``."""
        return f"{key} = {self.text!r}"


def is_spec(value) -> bool:
    """Whether ``value`` is an adapter spec (``reasoning_gym:...``) rather than a path or file:Class."""
    return isinstance(value, str) and value.split(":", 1)[0] in ADAPTERS and ":" in value


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_spec(text: str, key: str) -> Spec:
    """``text`` as a :class:`Spec`; ``key`` is the config key it came from, for messages."""
    adapter, _, rest = str(text).strip().partition(":")
    if adapter not in ADAPTERS:
        raise ConfigError(f"{key} = {text!r}: unknown adapter {adapter!r}; valid: {sorted(ADAPTERS)}")
    target, _, query = rest.partition("?")
    target = target.strip()
    if not target:
        raise ConfigError(f"{key} = {text!r}: names no {ADAPTERS[adapter][2]} after '{adapter}:'")
    options: dict = {}
    for part in filter(None, query.split("&")):
        name, eq, value = part.partition("=")
        name = unquote(name).strip()
        if not eq or not name:
            raise ConfigError(f"{key} = {text!r}: option {part!r} is not key=value")
        if name in options:
            raise ConfigError(f"{key} = {text!r}: option {name!r} is given twice")
        options[name] = _value(unquote(value))
    return Spec(adapter, target, options, str(text).strip())


def require(adapter: str, where: str):
    """The adapter's package, imported; a :class:`ConfigError` naming the pip extra when missing.
    ``where`` names the setting (``rollout.multi_turn.environment = 'textarena:TicTacToe-v0'``)."""
    module, extra, _ = ADAPTERS[adapter]
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(f"{where} needs the package {module.split('.')[0]!r}, which cannot be "
                          f"imported ({err}); install it with: pip install 'steadyrl[{extra}]'") from None


def take(options: dict, name: str, spec: Spec, key: str, model) -> object:
    """Pop option ``name`` of ``spec``, as the adapter's typed options ``model``
    (:mod:`steadyrl.envs.options`) declares it: its default when absent, else checked to be
    of its type and within its lower bound."""
    field = model.model_fields[name]
    declared = typing.get_args(field.annotation) or (field.annotation,)
    kinds = tuple(k for d in declared for k in ((int, float) if d is float else (d,)))  # a number: 60 or 60.0
    minimum = next((m.ge for m in field.metadata if getattr(m, "ge", None) is not None), None)
    return _take(options, name, field.default, kinds, spec, key, minimum=minimum)


def _take(options: dict, name: str, default, kind, spec: Spec, key: str, *, minimum=None):
    """Pop option ``name`` (``default`` when absent), checked to be a ``kind`` >= ``minimum``."""
    value = options.pop(name, default)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (bool not in kinds and isinstance(value, bool))
    if ok and minimum is not None and value is not None and value < minimum:
        ok = False
    if not ok:
        names = {"int": "an integer", "float": "a number", "str": "text", "bool": "true or false", "NoneType": "null"}
        what = " or ".join(names.get(k.__name__, k.__name__) for k in kinds)
        what += f" >= {minimum}" if minimum is not None else ""
        raise ConfigError(f"{spec.where(key)}: option {name}={value!r} must be {what}")
    return value
