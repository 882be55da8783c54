"""Which series a panel of plain lines draws, how each looks, and what its legend says.

Pure data, no matplotlib: the drawing in ``draw.py`` only carries these out.

* One run: colour tells the series apart (``C0``, ``C1``, ...); right-axis series are dashed.
* Several runs: colour tells the runs apart (one each, the same in every panel), line style and
  marker shape tell a run's series apart; every panel's legend names the runs by colour, then the
  series by style in grey.
* Sparse series with :data:`~steadyrl.plot.panels.FEW_POINTS` points or fewer are bare points
  (``style`` ``"none"``): a line between the evaluation before and after training would show
  values nobody measured.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .data import RAW_POINTS_MAX, Run
from .panels import FEW_POINTS, Line, Panel

STYLES = ("-", "--", ":", "-.", (0, (6, 1.5, 1, 1.5, 1, 1.5)), (0, (10, 3)))
"""Line styles that tell a run's series apart when colours tell runs apart (comparison)."""
MARKERS = ("o", "s", "^", "D", "v", "P")
"""Marker shapes of sparse (evaluation) series, one per series."""
SERIES_GREY = "0.35"  # legend entries of series when colours stand for runs


@dataclass(frozen=True)
class Series:
    """One run's series in a panel, as drawn."""

    run: int  # index into the runs
    key: str
    label: str
    color: str
    style: str | tuple  # a matplotlib line style; "none" for bare points
    marker: str | None  # None: no markers (a long, smoothed series)
    right: bool  # on the twin axis


@dataclass(frozen=True)
class Entry:
    """One legend entry."""

    label: str
    color: str
    style: str | tuple
    marker: str | None


def run_colors(runs: Sequence[Run]) -> list[str]:
    """One distinct colour per run (the matplotlib cycle ``C0 ... C9``, then again)."""
    return [f"C{i % 10}" for i in range(len(runs))]


def present_lines(panel: Panel, runs: Sequence[Run]) -> tuple[list[Line], bool]:
    """The panel's lines that some run logged (then its ``extra`` keys), and whether they are all
    right-axis ones (they are then drawn on the left axis, which takes the right one's units)."""
    keys = {k for r in runs for k in panel.keys(r)}
    present = [ln for ln in panel.lines if any(r.get(ln.key) is not None for r in runs)]
    present += [Line(k, _extra_label(panel, k)) for k in sorted(keys - {ln.key for ln in panel.lines})]
    if present and not any(not ln.right for ln in present):
        return [Line(ln.key, ln.label) for ln in present], True
    return present, False


def _extra_label(panel: Panel, key: str) -> str:
    """The legend label of an ``extra`` key: the regex's first group (a reward's name), else the
    key without its section (``pass@4``)."""
    match = re.fullmatch(panel.extra, key)
    return match.group(1) if match is not None and match.groups() else key.split("/", 1)[1]


def panel_series(panel: Panel, runs: Sequence[Run]) -> list[Series]:
    """Every (run, line) pair the panel draws, with its colour, style, marker and axis."""
    compare, colors = len(runs) > 1, run_colors(runs)
    lines, _ = present_lines(panel, runs)
    logged = [(ln, j, xy) for ln in lines for j, r in enumerate(runs) if (xy := r.get(ln.key)) is not None]
    short = all(len(xy[0]) <= RAW_POINTS_MAX for _, _, xy in logged)
    out = []
    for i, ln in enumerate(lines):
        for ln_, j, xy in logged:
            if ln_ is not ln:
                continue
            if panel.sparse and len(xy[0]) <= FEW_POINTS:
                style = "none"
            else:
                style = STYLES[i % len(STYLES)] if compare else ("--" if ln.right else "-")
            marker = MARKERS[i % len(MARKERS)] if panel.sparse else "o" if short else None
            label = ln.label + (" (right axis)" if ln.right else "")
            out.append(Series(j, ln.key, label, colors[j] if compare else f"C{i}", style, marker, ln.right))
    return out


def legend_entries(series: Sequence[Series], runs: Sequence[Run]) -> list[Entry]:
    """One run: an entry per series. Several: an entry per run (its colour, its name), then, when the
    panel has more than one series, an entry per series (its style and marker, in grey)."""
    if len(runs) == 1:
        return _unique(Entry(s.label, s.color, s.style, s.marker) for s in series)
    entries = run_entries(runs, {s.run for s in series})
    per_series = _unique(Entry(s.label, SERIES_GREY, s.style, s.marker) for s in series)
    return entries + (per_series if len(per_series) > 1 else [])


def run_entries(runs: Sequence[Run], shown: set[int]) -> list[Entry]:
    """An entry per run that the panel shows (index in ``shown``): its colour and its name."""
    colors = run_colors(runs)
    return [Entry(run.name, colors[j], "-", None) for j, run in enumerate(runs) if j in shown]


def _unique(entries) -> list[Entry]:
    seen: dict[str, Entry] = {}
    for e in entries:
        seen.setdefault(e.label, e)
    return list(seen.values())
