"""steadyrl.envs: adapters to the ecosystem's environments and procedural tasks.

A spec names the package, the task or game, and options, in one string::

    reasoning_gym:<task>[?key=value&...]     data rows (data.train_path / eval_path / *_sources[].path)
    textarena:<GameId>[?key=value&...]       rollout.multi_turn.environment (and data rows: one per game start)
    openenv:<base_url>[?key=value&...]       rollout.multi_turn.environment: a running OpenEnv server

Each adapter's package is an optional extra (``pip install 'steadyrl[reasoning-gym]'``,
``[textarena]``, ``[openenv]``), imported only when a spec names it. Everything a spec gets wrong
(an unknown task or game, a package that is not installed, an option the adapter refuses) is a
:class:`~steadyrl.errors.ConfigError` raised while the run is built, before any model loads.

This package sits low: it imports ``errors`` and the adapters' own packages only (``data``,
``rewards`` and ``agents`` import it, never the other way round). See ``docs/environments.md``.
"""

from .spec import ADAPTERS, Spec, is_spec, parse_spec, require

__all__ = ["ADAPTERS", "Spec", "adapter_environment", "is_spec", "parse_spec", "require"]


def adapter_environment(text: str) -> type:
    """The environment class of ``rollout.multi_turn.environment = text``, an adapter spec (checked here)."""
    from ..errors import ConfigError

    spec = parse_spec(text, "rollout.multi_turn.environment")
    if spec.adapter == "textarena":
        from .textarena import environment_class
    elif spec.adapter == "openenv":
        from .openenv import environment_class
    else:
        raise ConfigError(f"rollout.multi_turn.environment = {text!r}: {spec.adapter} gives data rows, not an "
                          "environment; "
                          f"use it as data.train_path, or use textarena:<GameId> / openenv:<base_url> here")
    return environment_class(text)
