"""The one accumulator of a step's metrics: each metric's reduction is declared where it is recorded.

A metric is recorded with the method that says how it reduces over micro-batches, mini-batches,
draws and data-parallel ranks; nothing reads a reduction from a metric's name:

* ``mean(name, value, weight)``: a weighted mean (clip fractions, entropy, mean ratio, a rate a
  process reports: weight 1 each);
* ``total(name, value)``: adds up within an optimizer step and over ranks (losses with global
  denominators), reported as its average over the step's optimizer steps;
* ``same(name, value)``: every rank already holds it whole (the gradient norm after
  synchronisation, the global loss), averaged over optimizer steps likewise;
* ``count(name, value)``: adds up over everything (samples that failed, by reason);
* ``largest`` / ``smallest``: the extreme over the whole step (the ratio's max and min).

:class:`Count` is the declaration for a number that travels as a plain value before it is
recorded: a reward object's ``metrics()`` returns ``Count(n)`` for a count (``failures/<reason>``
of the built-in rewards), and the scorer records it as one (:mod:`steadyrl.rewards.scoring`).

Torch-free: :meth:`Metrics.result` imports :mod:`steadyrl.distributed` when it is called.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Literal

Reduction = Literal["mean", "total", "same", "count", "max", "min"]
"""How a metric reduces: the names of :class:`Metrics`' recording methods (``max`` / ``min``:
``largest`` / ``smallest``)."""

REDUCTIONS: tuple[str, ...] = ("mean", "total", "same", "count", "max", "min")


class Count(float):
    """A number that is a count: summed over processes and draws, not averaged."""

    __slots__ = ()


class Metrics:
    """Accumulates a step's metrics, each with the reduction its recording method declares
    (module doc). Across data-parallel ranks (:meth:`result`) or parts merged on one process
    (:meth:`merged`), weighted means pool their sums and weights, totals and counts add up and
    extremes take the extreme."""

    def __init__(self) -> None:
        self._weighted: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self._totals: dict[str, float] = defaultdict(float)
        self._same: dict[str, float] = defaultdict(float)
        self._counts: dict[str, float] = defaultdict(float)
        self._largest: dict[str, float] = {}
        self._smallest: dict[str, float] = {}
        self.optimizer_steps = 0
        self.empty_minibatches = 0

    def mean(self, name: str, value, weight: float) -> None:
        acc = self._weighted[name]
        acc[0] += float(value) * weight
        acc[1] += weight

    def total(self, name: str, value) -> None:
        self._totals[name] += float(value)

    def same(self, name: str, value) -> None:
        self._same[name] += float(value)

    def count(self, name: str, value) -> None:
        self._counts[name] += float(value)

    def largest(self, name: str, value) -> None:
        self._largest[name] = max(self._largest.get(name, -math.inf), float(value))

    def smallest(self, name: str, value) -> None:
        self._smallest[name] = min(self._smallest.get(name, math.inf), float(value))

    def record(self, name: str, value, how: Reduction, weight: float = 1.0) -> None:
        """Record ``value`` with the reduction ``how`` (one of :data:`REDUCTIONS`), for a metric
        whose reduction was declared elsewhere (a policy loss's, :mod:`steadyrl.functional.losses`)."""
        if how == "mean":
            self.mean(name, value, weight)
        elif how in ("total", "same", "count"):
            getattr(self, how)(name, value)
        elif how in ("max", "min"):
            (self.largest if how == "max" else self.smallest)(name, value)
        else:
            raise ValueError(f"metric {name!r}: reduction must be one of {', '.join(REDUCTIONS)}; got {how!r}")

    def _state(self) -> tuple:
        return (dict(self._weighted), dict(self._totals), dict(self._counts), self._largest, self._smallest)

    def _reduce(self, states: list[tuple]) -> dict[str, float]:
        weighted: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        totals: dict[str, float] = defaultdict(float)
        counts: dict[str, float] = defaultdict(float)
        largest: dict[str, float] = {}
        smallest: dict[str, float] = {}
        for part_weighted, part_totals, part_counts, part_largest, part_smallest in states:
            for k, (s, w) in part_weighted.items():
                weighted[k][0] += s
                weighted[k][1] += w
            for k, v in part_totals.items():
                totals[k] += v
            for k, v in part_counts.items():
                counts[k] += v
            for k, v in part_largest.items():
                largest[k] = max(largest.get(k, -math.inf), v)
            for k, v in part_smallest.items():
                smallest[k] = min(smallest.get(k, math.inf), v)
        steps = max(self.optimizer_steps, 1)
        out = {k: (s / w if w > 0 else 0.0) for k, (s, w) in weighted.items()}
        out.update({k: v / steps for k, v in totals.items()})
        out.update({k: v / steps for k, v in self._same.items()})
        out.update(counts)
        out.update(largest)
        out.update(smallest)
        return out

    def merged(self, *others: Metrics) -> dict[str, float]:
        """The metrics of this accumulator and ``others`` together, on this process."""
        return self._reduce([self._state()] + [o._state() for o in others])

    def result(self) -> dict[str, float]:
        """The metrics of the whole step over all ranks (a collective: every rank calls it)."""
        from . import distributed as dist

        out = self._reduce(dist.gather_objects(self._state()))
        out["health/empty_minibatches"] = float(self.empty_minibatches)  # the same on every rank
        return out
