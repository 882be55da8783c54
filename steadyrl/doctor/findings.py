"""What a detector returns, and the registry of detectors (a dict from name to function, filled
by a decorator, as the functional core's estimators and losses are).

A detector is ``fn(run: RunData, t: Thresholds) -> Finding | None``: it reads the run's metrics
and samples, compares them with its thresholds, and either says nothing or returns one
:class:`Finding` naming the step range, the evidence (numbers) and the change most likely to help.
Findings are ranked by ``severity``: how far past its threshold the evidence is (1 = just past).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["DETECTORS", "Finding", "register_detector"]


@dataclass
class Finding:
    detector: str
    title: str
    steps: tuple[float, float]
    evidence: list[str]
    advice: str
    severity: float
    """>= 1: the evidence over its threshold (a ratio), capped at 1000."""
    examples: tuple[float, float] | None = None
    """The steps whose samples show the problem best (default: ``steps``)."""

    def __post_init__(self) -> None:
        self.severity = min(max(float(self.severity), 1.0), 1000.0)


Detector = Callable[..., "Finding | None"]
DETECTORS: dict[str, Detector] = {}
"""Detector name -> function, in registration order."""


def register_detector(name: str):
    """Decorator: register a detector under ``name``."""

    def wrap(fn: Detector) -> Detector:
        if name in DETECTORS:
            raise ValueError(f"detector {name!r} is already registered")
        DETECTORS[name] = fn
        return fn

    return wrap
