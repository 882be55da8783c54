"""Drawing the dashboard: panels, legends placed off the data, the header, the figure.

Uses ``matplotlib.figure.Figure`` with an Agg canvas directly (no pyplot): nothing global is
touched, no GUI backend is needed, and figures are freed when they go out of scope.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from .data import RAW_POINTS_MAX, Run, ema, smoothing_span
from .panels import PANELS, TIME_PARTS, Line, Panel, has_data, reward_functions

STYLES = ("-", "--", ":", "-.", (0, (6, 1.5, 1, 1.5, 1, 1.5)), (0, (10, 3)))
"""Line styles that tell series apart when colours tell runs apart (comparison)."""
SKIP_COLOR = "#d62728"


def _draw(ax, xy, color, label, style="-", sparse=False):
    """One series: raw with markers when short or sparse, else faint raw under its EMA."""
    steps, values = xy
    n = len(steps)
    if sparse or n <= RAW_POINTS_MAX:
        ax.plot(steps, values, color=color, ls=style, lw=1.4, marker="o", ms=3.2 if n > 1 else 5, label=label)
        return
    ax.plot(steps, values, color=color, ls=style, lw=0.8, alpha=0.25)
    ax.plot(steps, ema(values, smoothing_span(n)), color=color, ls=style, lw=1.7, label=label)


def _draw_reward(ax, runs, colors, compare) -> list:
    """Mean reward (min–max band when one run), and each reward function when there are several
    (or no combined mean)."""
    for run, color in zip(runs, colors):
        mean, lo, hi = run.get("reward/mean"), run.get("reward/min"), run.get("reward/max")
        if lo is not None and hi is not None and not compare:
            steps, i_lo, i_hi = np.intersect1d(lo[0], hi[0], return_indices=True)
            if len(steps) == 1:
                ax.vlines(steps, lo[1][i_lo], hi[1][i_hi], color=color, alpha=0.2, lw=8, label="min–max")
            else:
                span = smoothing_span(len(steps))
                ax.fill_between(steps, ema(lo[1][i_lo], span), ema(hi[1][i_hi], span), color=color, alpha=0.13,
                                lw=0, label="min–max")  # fmt: skip
        if mean is not None:
            _draw(ax, mean, color, None if compare else "combined" if len(reward_functions(run)) > 1 else "mean")
        funcs = reward_functions(run)
        if not compare and (len(funcs) > 1 or mean is None):
            for j, key in enumerate(funcs):
                _draw(ax, run.get(key), f"C{j + 1}", key.split("/")[1])
    return [] if compare else ax.get_legend_handles_labels()[0]


def _draw_time(ax, runs, colors, compare) -> list:
    """One run: generate / score / update (+ other) stacked; several: each run's step time."""
    if compare:
        for run, color in zip(runs, colors):
            if (total := run.get("time/step_s")) is not None:
                _draw(ax, total, color, None)
        return []
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


def _format_axis(ax, percent: bool, logy: bool, values: list[np.ndarray]) -> None:
    from matplotlib.ticker import PercentFormatter

    if percent:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=None))
    finite = np.concatenate(values) if values else np.array([])
    finite = finite[np.isfinite(finite)]
    if len(finite) and np.ptp(finite) <= 1e-6 * max(abs(finite).max(), 1e-300):
        # a constant series (a fixed learning rate): centre it instead of zooming into rounding noise
        level = float(finite.mean())
        ax.set_ylim(*((level * 0.5, level * 1.5) if level > 0 else (level * 1.5, level * 0.5) if level < 0 else (0, 1)))
    if logy and len(finite) and finite.min() > 0 and finite.max() / finite.min() > 100:
        ax.set_yscale("log")  # spans decades (grad norm spikes)


def _draw_lines(ax, panel: Panel, runs: Sequence[Run], colors: Sequence[str], compare: bool):
    """A panel of plain series; right-axis ones on a twin axis. Returns (twin, legend handles)."""
    from matplotlib.lines import Line2D

    keys = {k for r in runs for k in panel.keys(r)}
    present = [ln for ln in panel.lines if any(r.get(ln.key) is not None for r in runs)]
    present += [Line(k, k.split("/")[1]) for k in sorted(keys - {ln.key for ln in panel.lines})]
    percent, rlabel = panel.percent, panel.rlabel
    if not any(not ln.right for ln in present):  # right-axis series only: draw them on the left
        present = [Line(ln.key, ln.label) for ln in present]
        percent, rlabel = panel.rpercent, ""
        ax.set_ylabel(panel.rlabel)
    twin, left_vals, right_vals, handles = None, [], [], []
    short = all(len(xy[0]) <= RAW_POINTS_MAX for r in runs for ln in present if (xy := r.get(ln.key)) is not None)
    for i, ln in enumerate(present):
        if ln.right and twin is None:
            twin = ax.twinx()
            twin.spines["right"].set_visible(True)
            twin.grid(False)
            twin.set_ylabel(rlabel)
        style = STYLES[i % len(STYLES)] if compare else ("--" if ln.right else "-")
        label = ln.label + (" (right axis)" if ln.right else "")
        for run, color in zip(runs, colors):
            if (xy := run.get(ln.key)) is not None:
                _draw(twin if ln.right else ax, xy, color if compare else f"C{i}", label, style, panel.sparse)
                (right_vals if ln.right else left_vals).append(xy[1])
        handles.append(Line2D([], [], color="0.35" if compare else f"C{i}", ls=style, lw=1.5, label=label,
                              marker="o" if panel.sparse or short else None, ms=3.2))  # fmt: skip
    _format_axis(ax, percent, panel.logy, left_vals)
    if twin is not None:
        _format_axis(twin, panel.rpercent, False, right_vals)
    return twin, handles


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
        twin, handles = _draw_lines(ax, panel, runs, colors, compare)
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

    panels = [p for p in PANELS if has_data(p, runs)]
    missing = [p.title for p in PANELS if p not in panels]
    n = max(1, len(panels))
    ncols = 3 if n in (3, 5, 6, 9) else min(n, 4)
    nrows = -(-n // ncols)
    width = MARGIN_L + ncols * PANEL_W + (ncols - 1) * GAP_W + MARGIN_R
    header = _header_text(runs, missing, width)
    header_h = HEADER_H + 0.2 * len(header[3])
    height = header_h + TITLE_H + nrows * PANEL_H + (nrows - 1) * GAP_H + MARGIN_B
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(nrows, ncols, left=MARGIN_L / width, right=1 - MARGIN_R / width,
                            top=1 - (header_h + TITLE_H) / height, bottom=MARGIN_B / height,
                            wspace=GAP_W / PANEL_W, hspace=GAP_H / PANEL_H)  # fmt: skip
    axes = grid.subplots(squeeze=False).ravel()
    colors = [f"C{i}" for i in range(len(runs))]
    drawn = [(ax, panel, *_draw_panel(ax, panel, runs, colors)) for ax, panel in zip(axes, panels)]
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    fig.text(0.5, 0.12 / height, "training step", ha="center", va="bottom", fontsize=10)
    _header(fig, width, height, runs, header, colors)
    renderer = fig.canvas.get_renderer()
    for ax, panel, twin, handles in drawn:
        _place_legend(ax, twin, handles, renderer, panel.kind == "time")
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


def _header_text(runs: Sequence[Run], missing: list[str], width: float) -> tuple[str, str, str, list[str]]:
    """(title, facts line, "not logged" note, the note's lines below the facts): no lines when the
    note fits at the right end of the facts line."""
    import textwrap

    if len(runs) == 1:
        title, facts = runs[0].name, "    ·    ".join(_facts(runs[0]))
    else:
        title = f"{len(runs)} runs compared"
        facts = "skipped steps: dotted lines in the run's colour" if any(len(r.skipped_steps()) for r in runs) else ""
    note = "not logged: " + ", ".join(missing) if missing else ""
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


