"""Typed, validated run configuration: schema, presets, YAML + dotted overrides, rendering."""

from . import compat  # noqa: F401 - registers the rules of what is not supported together with the schema
from .advice import config_notes
from .loading import config_to_dict, load_config, parse_override, save_config
from .presets import ALGORITHM_PRESETS, DEMO_CONFIG
from .schema import Config
from .show import render_config

__all__ = [
    "Config",
    "load_config",
    "parse_override",
    "save_config",
    "config_to_dict",
    "render_config",
    "config_notes",
    "ALGORITHM_PRESETS",
    "DEMO_CONFIG",
]
