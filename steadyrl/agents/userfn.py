"""Loading a user object named in the config (``file.py:name`` or ``package.module:name``).

Environments, tools and tool parsers are named the way reward functions are; this reuses the
reward loader's importers and turns their errors into :class:`~steadyrl.errors.ConfigError` s that
name the config key.
"""

from __future__ import annotations

from ..errors import ConfigError, RewardLoadError


def load_object(spec: str, key: str):
    """The object ``spec`` names; a ConfigError naming ``key`` when it cannot be loaded."""
    from ..rewards.loader import _attribute, _import_file, _import_module

    if not isinstance(spec, str) or ":" not in spec or not all(spec.rsplit(":", 1)):
        raise ConfigError(f"{key} = {spec!r}: expected 'path/to/file.py:name' or 'package.module:name'")
    target, attr = spec.strip().rsplit(":", 1)
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    try:
        module = _import_file(spec, target) if is_file else _import_module(spec, target)
        return _attribute(spec, module, attr, shown=target)
    except RewardLoadError as err:
        raise ConfigError(f"{key}: {str(err).removeprefix('reward ')}") from err
