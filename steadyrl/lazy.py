"""Attributes of a package imported on first use (PEP 562), so that importing the package is cheap.

``steadyrl.functional`` and ``steadyrl.rewards`` hold tensor code, but the config layer reads a few
names from them (constants, reward names); with ``__getattr__ = lazy_attributes(__name__, TABLE,
globals())`` a name listed in ``TABLE`` (name -> submodule) is imported when first read, and
reading a config never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_attributes(package: str, table: dict[str, str], namespace: dict) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``table[name]`` (a submodule of ``package``) on first use."""

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{table[name]}", package), name)
        namespace[name] = value  # the next read finds it without this function
        return value

    return __getattr__
