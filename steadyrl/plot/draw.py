"""Drawing the dashboard: panels, legends placed off the data, the header, the figure.

Uses ``matplotlib.figure.Figure`` with an Agg canvas directly (no pyplot): nothing global is
touched, no GUI backend is needed, and figures are freed when they go out of scope.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from .data import RAW_POINTS_MAX, Run, ema, smoothing_span
from .panels import TIME_PARTS, Panel, reward_functions, reward_spread, select_panels
from .series import Entry, Series, legend_entries, panel_series, present_lines, run_colors, run_entries

SKIP_COLOR = "#d62728"


def _draw(ax, xy, s: Series | None, color: str, label, sparse: bool = False):
    """One series: raw with markers when short or sparse (bare points for a few evaluations),
    else faint raw under its EMA."""
    steps, values = xy
    n = len(steps)
    style, marker = (s.style, s.marker) if s is not None else ("-", "o" if n <= RAW_POINTS_MAX else None)
    if sparse or marker is not None:
        points = style == "none"
        ax.plot(steps, values, color=color, ls=style, lw=1.4, marker=marker or "o",
                ms=6 if points else 3.2 if n > 1 else 5, label=label, clip_on=not points)  # fmt: skip
        return
    ax.plot(steps, values, color=color, ls=style, lw=0.8, alpha=0.25)
    ax.plot(steps, ema(values, smoothing_span(n)), color=color, ls=style, lw=1.7, label=label)


def _draw_reward(ax, runs, colors, compare) -> list:
    """Mean reward (a ± std band when one run). Each reward function's mean has a panel of its
    own ("Reward functions"): its scale may be far from the combined reward's."""
    for run, color in zip(runs, colors):
        mean, band = run.get("reward/mean"), reward_spread(run)
        if band is not None and not compare:
            steps, lo, hi, label = band
            if len(steps) == 1:
                ax.vlines(steps, lo, hi, color=color, alpha=0.2, lw=8, label=label)
            else:
                span = smoothing_span(len(steps))
                ax.fill_between(steps, ema(lo, span), ema(hi, span), color=color, alpha=0.13, lw=0, label=label)
        if mean is not None:
            _draw(ax, mean, None, color, None if compare else "combined" if len(reward_functions(run)) > 1 else "mean")
    if compare:
        shown = {j for j, r in enumerate(runs) if r.get("reward/mean") is not None}
        return _handles(run_entries(runs, shown))
    return ax.get_legend_handles_labels()[0]


def _draw_time(ax, runs, colors, compare) -> list:
    """One run: generate / score / update (+ other) stacked; several: each run's step time."""
    if compare:
        for run, color in zip(runs, colors):
            if (total := run.get("time/step_s")) is not None:
                _draw(ax, total, None, color, None)
        return _handles(run_entries(runs, {j for j, r in enumerate(runs) if r.get("time/step_s") is not None}))
    run = runs[0]
    parts = {label: run.get(k) for k, label in TIME_PARTS.items() if run.get(k) is not None}
    total = run.get("time/step_s")
    steps = np.unique(np.concatenate([xy[0] for xy in [*parts.values(), total] if xy is not None]))
    stack = {label: _align(steps, xy) for label, xy in parts.items()}
    if total is not None:
        rest = _align(steps, total) - sum(stack.values()) if stack else _align(steps, total)
        stack["other" if parts else "step"] = np.clip(rest, 0, None)
    ys = [ema(v, smoothing_span(len(steps))) for v in stack.values()]
    palette = {"generate": "#4c72b0", "score": "#dd8452", "update": "#55a868", "other": "#b5b5b5", "step": "#4c72b0"}
    cols = [palette[k] for k in stack]
    if len(steps) == 1:
        bottom = 0.0
        for label, y, c in zip(stack, ys, cols):
            ax.bar(steps, y, bottom=bottom, width=0.6, color=c, label=label)
            bottom = bottom + y
    else:
        ax.stackplot(steps, *ys, labels=list(stack), colors=cols, alpha=0.85, lw=0)
    ax.set_ylim(0, 1.3 * float(np.max(np.sum(ys, axis=0))))  # head room for the legend
    return ax.get_legend_handles_labels()[0]


def _align(steps: np.ndarray, xy: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Values of ``xy`` at ``steps``, 0 where it was not logged."""
    out = np.zeros(len(steps))
    if xy is not None:
        out[np.searchsorted(steps, xy[0])] = xy[1]
    return out


def _format_axis(ax, percent: bool, logy: bool, values: list[np.ndarray], unit: bool = False) -> None:
    from matplotlib.ticker import PercentFormatter

    if percent:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=None))
    if unit:  # fractions of one kind (accuracy, pass@k) against one fixed scale
        ax.set_ylim(-0.03, 1.03)
        ax.set_yticks(np.linspace(0, 1, 6))
        return
    finite = np.concatenate(values) if values else np.array([])
    finite = finite[np.isfinite(finite)]
    if len(finite) and np.ptp(finite) <= 1e-6 * max(abs(finite).max(), 1e-300):
        # a constant series (a fixed learning rate): centre it instead of zooming into rounding noise
        level = float(finite.mean())
        ax.set_ylim(*((level * 0.5, level * 1.5) if level > 0 else (level * 1.5, level * 0.5) if level < 0 else (0, 1)))
    if logy and len(finite) and finite.min() > 0 and finite.max() / finite.min() > 100:
        ax.set_yscale("log")  # spans decades (grad norm spikes)


def _draw_lines(ax, panel: Panel, runs: Sequence[Run]):
    """A panel of plain series; right-axis ones on a twin axis. Returns (twin, legend handles)."""
    _, moved = present_lines(panel, runs)
    percent, rlabel = (panel.rpercent, "") if moved else (panel.percent, panel.rlabel)
    if moved:  # right-axis series only: drawn on the left axis
        ax.set_ylabel(panel.rlabel)
    series = panel_series(panel, runs)
    twin, left_vals, right_vals = None, [], []
    for s in series:
        if s.right and twin is None:
            twin = ax.twinx()
            twin.spines["right"].set_visible(True)
            twin.grid(False)
            twin.set_ylabel(rlabel)
        xy = runs[s.run].get(s.key)
        _draw(twin if s.right else ax, xy, s, s.color, s.label, panel.sparse)
        (right_vals if s.right else left_vals).append(xy[1])
    if any(s.style == "none" for s in series):
        ax.margins(y=0.15)  # room for the value labels of bare points
    _format_axis(ax, percent, panel.logy, left_vals, panel.unit and not moved)
    if twin is not None:
        _format_axis(twin, panel.rpercent, False, right_vals)
    return twin, _handles(legend_entries(series, runs))


def _handles(entries: Sequence[Entry]) -> list:
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=e.color, ls=e.style, lw=1.5 if e.style != "none" else 0, label=e.label,
                   marker=e.marker, ms=5 if e.style == "none" else 3.2) for e in entries]  # fmt: skip


def _label_points(ax, panel: Panel, runs: Sequence[Run]) -> None:
    """Write the value beside each bare point (a few evaluations), nudged apart where they would
    overlap; the first points' labels go right of them, the last ones' left."""
    points = [(x, y, s.color) for s in panel_series(panel, runs) if s.style == "none" and not s.right
              for x, y in zip(*runs[s.run].get(s.key))]  # fmt: skip
    if not points:
        return
    xmax = max(x for x, _, _ in points)
    to_px = ax.transData.transform
    for x in sorted({x for x, _, _ in points}):
        here = sorted((p for p in points if p[0] == x), key=lambda p: p[1])
        pys = [to_px((x, y))[1] for _, y, _ in here]
        placed: list[float] = []
        for py in pys:
            placed.append(max(py, placed[-1] + 11) if placed else py)  # 11 px apart at least
        shift = (placed[-1] - pys[-1]) / 2  # spread both ways around the points
        right = x < xmax or len({p[0] for p in points}) == 1
        for (_, y, color), py, at in zip(here, pys, placed):
            text = f"{y:.0%}" if panel.percent else f"{y:.3g}"
            dy = (at - shift - py) * 72 / ax.figure.dpi
            ax.annotate(text, (x, y), xytext=(7 if right else -7, dy), textcoords="offset points", color=color,
                        fontsize=7.5, ha="left" if right else "right", va="center", weight="bold")  # fmt: skip


def _draw_panel(ax, panel: Panel, runs: Sequence[Run], colors: Sequence[str]):
    """Draw one panel; returns (twin axis or None, legend handles)."""
    from matplotlib.ticker import MaxNLocator

    compare = len(runs) > 1
    ax.set_title(panel.title, loc="left")
    ax.set_ylabel(panel.ylabel)
    twin = None
    if panel.kind == "reward":
        handles = _draw_reward(ax, runs, colors, compare)
    elif panel.kind == "time":
        handles = _draw_time(ax, runs, colors, compare)
    else:
        twin, handles = _draw_lines(ax, panel, runs)
    for run, color in zip(runs, colors):
        if len(skipped := run.skipped_steps()):
            ax.vlines(skipped, 0, 1, transform=ax.get_xaxis_transform(), colors=color if compare else SKIP_COLOR,
                      linestyles=":", lw=1.1, alpha=0.7)  # fmt: skip
    lo, hi = min(_first_last(r)[0] for r in runs), max(_first_last(r)[1] for r in runs)
    if hi == lo:
        ax.set_xlim(lo - 1, hi + 1)
        ax.set_xticks([lo])
    else:
        pad = 0.5 if hi - lo <= RAW_POINTS_MAX else 0.0  # room for the markers of short runs
        ax.set_xlim(lo - pad, hi + pad)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
    return twin, handles


_LEGEND_LOCS = ("upper left", "upper right", "lower left", "lower right", "center right", "center left")


def _place_legend(ax, twin, handles, renderer, time_panel: bool) -> None:
    """Put the legend where it hides the fewest data points of both axes (``loc="best"`` only sees
    the axis it belongs to, not the twin)."""
    from matplotlib.ticker import PercentFormatter

    if len(handles) < 2:
        return
    target = twin or ax
    if time_panel:
        target.legend(handles=handles, loc="upper left", ncols=len(handles))
        return
    best = _best_loc(ax, twin, target, handles, renderer, _LEGEND_LOCS)
    if best[0] > 0 and ax.get_yscale() == "linear" and (twin is None or twin.get_yscale() == "linear"):
        # every spot hides data: raise the top of the y range(s) by the legend's height, put it there
        frac = min(0.5, best[2] / ax.get_window_extent(renderer).height + 0.04)
        for a in (ax, twin):
            if a is not None:
                lo, hi = a.get_ylim()
                a.set_ylim(lo, lo + (hi - lo) / (1 - frac))
                if isinstance(a.yaxis.get_major_formatter(), PercentFormatter) and hi <= 1.1:
                    a.set_yticks([t for t in a.get_yticks() if lo <= t <= 1.0 + 1e-9])  # no tick above 100 %
        best = _best_loc(ax, twin, target, handles, renderer, _LEGEND_LOCS[:2])
    target.legend(handles=handles, loc=best[1], ncols=best[3])


def _best_loc(ax, twin, target, handles, renderer, locs) -> tuple[int, str, float, int]:
    """(points hidden, location, legend height in pixels) of the legend spot hiding the fewest
    points of the lines (resampled along x, so a sparse line's segments count too)."""
    pts = [_resample(a.transData.transform(ln.get_xydata())) for a in (ax, twin) if a is not None for ln in a.get_lines()]
    pts = np.concatenate(pts) if pts else np.zeros((0, 2))
    tolerated = len(pts) // 200  # a few faint raw points under a legend are fine
    best = None
    ncols = 2 if len(handles) > 4 else 1
    for loc in locs:
        legend = target.legend(handles=handles, loc=loc, ncols=ncols)
        bb = legend.get_window_extent(renderer)
        hidden = int(np.sum((pts[:, 0] >= bb.x0) & (pts[:, 0] <= bb.x1) & (pts[:, 1] >= bb.y0) & (pts[:, 1] <= bb.y1)))
        legend.remove()
        hidden = 0 if hidden <= tolerated else hidden
        if best is None or hidden < best[0]:
            best = (hidden, loc, bb.height, ncols)
    return best


def _resample(xy: np.ndarray, n: int = 200) -> np.ndarray:
    xy = xy[np.isfinite(xy).all(axis=1)]
    if len(xy) < 2 or len(xy) >= n:
        return xy
    order = np.argsort(xy[:, 0])
    x = np.linspace(xy[order, 0].min(), xy[order, 0].max(), n)
    return np.column_stack([x, np.interp(x, xy[order, 0], xy[order, 1])])


# Fixed layout, in inches (faster than constrained layout, and the panels are all alike):
PANEL_W, PANEL_H = 3.45, 2.45  # one panel's plotting area
MARGIN_L, MARGIN_R, GAP_W = 0.8, 0.8, 1.4  # y tick labels + label, on both sides (twin axes)
HEADER_H, TITLE_H, GAP_H, MARGIN_B = 0.62, 0.32, 0.72, 0.6


def figure(runs: Sequence[Run]):
    """The dashboard figure of ``runs`` (one: full detail; several: overlaid, one colour each)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels, missing, zero = select_panels(runs)
    n = max(1, len(panels))
    ncols = 3 if n in (3, 5, 6, 9) else 5 if n in (13, 14, 15) else min(n, 4)
    nrows = -(-n // ncols)
    width = MARGIN_L + ncols * PANEL_W + (ncols - 1) * GAP_W + MARGIN_R
    header = _header_text(runs, missing, zero, width)
    header_h = HEADER_H + 0.2 * len(header[3])
    height = header_h + TITLE_H + nrows * PANEL_H + (nrows - 1) * GAP_H + MARGIN_B
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(nrows, ncols, left=MARGIN_L / width, right=1 - MARGIN_R / width,
                            top=1 - (header_h + TITLE_H) / height, bottom=MARGIN_B / height,
                            wspace=GAP_W / PANEL_W, hspace=GAP_H / PANEL_H)  # fmt: skip
    axes = grid.subplots(squeeze=False).ravel()
    colors = run_colors(runs)
    drawn = [(ax, panel, *_draw_panel(ax, panel, runs, colors)) for ax, panel in zip(axes, panels)]
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    fig.text(0.5, 0.12 / height, "training step", ha="center", va="bottom", fontsize=10)
    _header(fig, width, height, runs, header, colors)
    renderer = fig.canvas.get_renderer()
    for ax, panel, twin, handles in drawn:
        _place_legend(ax, twin, handles, renderer, panel.kind == "time")
        if panel.sparse and len(runs) == 1:
            _label_points(ax, panel, runs)
    return fig


def _first_last(run: Run) -> tuple[float, float]:
    steps = np.concatenate([s for s, _ in run.series.values()])
    return float(steps.min()), float(steps.max())


def _facts(run: Run) -> list[str]:
    """The header line of one run: steps, reward start -> end, wall time, skipped steps, warnings."""
    first, last = _first_last(run)
    facts = [f"steps {first:g}–{last:g}" if last > first else f"step {first:g}"]
    if (mean := run.get("reward/mean")) is not None:
        k = max(1, min(10, len(mean[1]) // 5))
        if len(mean[1]) > 1:
            facts.append(f"reward {mean[1][:k].mean():.3g} → {mean[1][-k:].mean():.3g}" + (f" (means of {k} steps)" if k > 1 else ""))
        else:
            facts.append(f"reward {mean[1][0]:.3g}")
    if (t := run.get("time/step_s")) is not None:
        facts.append(f"wall time {_duration(t[1].sum())}")
    if len(skipped := run.skipped_steps()):
        facts.append(f"{len(skipped)} skipped step{'s' * int(len(skipped) > 1)} (red dotted lines)")
    if (w := run.get("health/warnings")) is not None and w[1][-1] > 0:
        facts.append(f"{w[1][-1]:g} warning{'s' * int(w[1][-1] != 1)}")
    failed = sum(xy[1].sum() for k, xy in run.series.items() if re.fullmatch(r"reward/.+/failed", k))
    if failed > 0:
        facts.append(f"{failed:g} failed reward call{'s' * int(failed != 1)}")
    return facts


def _header_text(runs: Sequence[Run], missing: list[str], zero: list[str],
                 width: float) -> tuple[str, str, str, list[str]]:
    """(title, facts line, "not logged" / "all zero" note, the note's lines below the facts): no
    lines when the note fits at the right end of the facts line."""
    import textwrap

    if len(runs) == 1:
        title, facts = runs[0].name, "    ·    ".join(_facts(runs[0]))
    else:
        title = f"{len(runs)} runs compared"
        facts = "skipped steps: dotted lines in the run's colour" if any(len(r.skipped_steps()) for r in runs) else ""
    notes = ["not logged: " + ", ".join(missing)] if missing else []
    notes += ["left out, all zero (one optimizer step per batch): " + ", ".join(zero)] if zero else []
    note = "; ".join(notes)
    chars = int(width * 12.5)  # ~characters of 10 pt text per line
    if len(facts) + len(note) + 8 <= chars:
        return title, facts, note, []
    return title, facts, note, textwrap.wrap(note, chars)


def _header(fig, width: float, height: float, runs: Sequence[Run], header: tuple, colors: Sequence[str]) -> None:
    """Run name (or "N runs compared" and a legend of runs), key facts, and what was not logged."""
    from matplotlib.lines import Line2D

    title, facts, note, note_lines = header
    x0, x1 = 0.12 / width, 1 - 0.12 / width
    title_y, facts_y = 1 - 0.1 / height, 1 - 0.62 / height
    if len(runs) > 1:
        handles = [Line2D([], [], color=c, lw=3, label=r.name) for r, c in zip(runs, colors)]
        fig.legend(handles=handles, loc="upper right", bbox_to_anchor=(x1, title_y + 0.04 / height),
                   ncols=min(len(runs), 6), fontsize=10, frameon=False)  # fmt: skip
    fig.text(x0, title_y, title, va="top", fontsize=15, weight="bold")
    fig.text(x0, facts_y, facts, va="bottom", fontsize=10.5, color="0.2")
    if note and not note_lines:  # it fits on the facts line, at the right
        fig.text(x1, facts_y, note, ha="right", va="bottom", fontsize=9, color="0.5")
    for i, line in enumerate(note_lines):
        fig.text(x0, facts_y - (0.2 * (i + 1)) / height, line, va="bottom", fontsize=9, color="0.5")


def _duration(seconds: float) -> str:
    from ..progress import format_duration

    return format_duration(float(seconds))


