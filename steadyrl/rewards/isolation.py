"""How a reward function is isolated from the trainer: the three levels and the platform's default.

Its own module, below :mod:`.runners` (which runs a function at a level) and :mod:`.code` (which picks
its own default from it), so that neither imports the other for one name.
"""

from __future__ import annotations

import os
import sys
from typing import Literal

__all__ = ["Isolation", "ISOLATIONS", "default_isolation"]

Isolation = Literal["process", "thread", "inline"]
ISOLATIONS: tuple[str, ...] = ("process", "thread", "inline")


def default_isolation() -> Isolation:
    """``"process"`` on Linux, ``"thread"`` elsewhere (no ``fork``, or a fork-unsafe macOS)."""
    return "process" if sys.platform.startswith("linux") and hasattr(os, "fork") else "thread"
