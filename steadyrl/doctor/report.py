"""The doctor's report.md: one line for a healthy run; otherwise each finding, most severe first,
with its step range, evidence, the change most likely to help, and example samples (best, worst
and longest completion of the finding's steps, from samples.jsonl).

Everything a run wrote is hostile text here (a completion, a config value, a reward's name): each
line goes through :func:`steadyrl.printable.printable` with no layout character kept, so a control
character shows as ``\x1b`` on the console and in report.md, and a line break in a value cannot
make a line of its own."""

from __future__ import annotations

from ..printable import printable
from .findings import Finding
from .run import RunData, finite_number, fmt

TEXT_MAX = 160
"""Longest prompt or completion quoted in the report (the rest is cut with '...')."""


def _quote(text: object) -> str:
    s = printable(" ".join(str(text).split()), keep="")  # one line, control characters as escapes
    s = s if len(s) <= TEXT_MAX else s[:TEXT_MAX] + "..."
    return "`" + s.replace("`", "'") + "`" if s else "(empty)"


def _line(text: object) -> str:
    """A finding's text on one line (it may quote the run's config values or reward names)."""
    return printable(text, keep="")


def _reward(row: dict) -> float | None:
    return finite_number(row.get("reward"))


def example_samples(run: RunData, steps: tuple[float, float]) -> tuple[list[tuple[str, dict]], str]:
    """``([(label, row), ...], where)``: the best, worst and longest samples logged in ``steps``
    (the whole run's when none was logged there)."""
    rows = [r for r in run.samples if steps[0] <= r.get("step", -1) <= steps[1]]
    where = f"steps {fmt(steps[0])}-{fmt(steps[1])}"
    if not rows:
        rows, where = run.samples, "the whole run (none logged in the finding's steps)"
    scored = [r for r in rows if _reward(r) is not None]
    picks: list[tuple[str, dict]] = []
    if scored:
        picks.append(("best", max(scored, key=_reward)))
        picks.append(("worst", min(scored, key=_reward)))
    if rows:
        picks.append(("longest", max(rows, key=lambda r: len(str(r.get("completion", ""))))))
    merged: dict[int, tuple[str, dict]] = {}  # one line for a sample that is best and longest
    for label, row in picks:
        seen = merged.get(id(row))
        merged[id(row)] = (f"{seen[0]}, {label}" if seen else label, row)
    return list(merged.values()), where


def _finding(i: int, f: Finding, run: RunData) -> list[str]:
    lines = [f"## {i}. {_line(f.title)} (steps {fmt(f.steps[0])}-{fmt(f.steps[1])})", "",
             f"Detector `{f.detector}`, severity {fmt(f.severity)} (1 = at its threshold).", ""]
    lines += [f"- {_line(e)}" for e in f.evidence]
    lines += ["", f"**Change:** {_line(f.advice)}", ""]
    picks, where = example_samples(run, f.examples or f.steps)
    if picks:
        lines.append(f"Samples from {where}:")
        lines.append("")
        for label, row in picks:
            reward = _reward(row)
            score = f"reward {fmt(reward)}" if reward is not None else "no reward"
            lines.append(f"- {label} (step {fmt(row.get('step', 0))}, {score}, "
                         f"{len(str(row.get('completion', '')))} chars): {_quote(row.get('prompt', ''))} -> "
                         f"{_quote(row.get('completion', ''))}")
        lines.append("")
    return lines


def too_short(run: RunData, min_steps: float) -> str | None:
    """The line saying ``run`` has fewer training steps than the trend detectors need, or None."""
    n = len(run.steps)
    if n >= min_steps:
        return None
    return (f"{n} training step(s); the trend detectors need at least min_steps = {fmt(min_steps)}, so only "
            "the detectors of single steps (skipped steps, failed episodes, a silent judge) could judge it")


def verdict(run: RunData, findings: list[Finding], min_steps: float) -> str:
    """One line for the console: ``healthy``, ``too short to judge (...)`` or the problems, first named."""
    if findings:
        return f"{len(findings)} problem(s), first: {printable(findings[0].title, keep='')} (`{findings[0].detector}`)"
    return "healthy" if too_short(run, min_steps) is None else f"too short to judge ({len(run.steps)} training step(s))"


def render(run: RunData, findings: list[Finding], detectors: int, changed: dict[str, float],
           min_steps: float = 6) -> str:
    """The report's markdown text (``min_steps``: the threshold below which a run is too short to judge)."""
    steps = run.steps
    where = f"steps {fmt(steps[0])}-{fmt(steps[-1])}"
    tuned = ("; thresholds changed: " + ", ".join(f"{k}={fmt(v)}" for k, v in changed.items())) if changed else ""
    short = too_short(run, min_steps)
    if not findings:
        if short is not None:
            return f"too short to judge: {_line(run.path)}: {short} ({where}, {detectors} detectors{tuned}).\n"
        return f"healthy: {_line(run.path)}: no problem found over {where} ({detectors} detectors{tuned}).\n"
    head = [f"# steadyrl doctor: {_line(run.path)}", "",
            f"{len(findings)} problem(s) found over {where} ({len(steps)} training steps, {len(run.samples)} "
            f"logged samples, {detectors} detectors{tuned}), most severe first:", ""]
    if short is not None:
        head[2:2] = [f"Too short to judge the trends: {short}.", ""]
    head += [f"{i}. {_line(f.title)} (`{f.detector}`, steps {fmt(f.steps[0])}-{fmt(f.steps[1])})"
             for i, f in enumerate(findings, 1)]
    body = [line for i, f in enumerate(findings, 1) for line in _finding(i, f, run)]
    return "\n".join([*head, "", *body]).rstrip() + "\n"
