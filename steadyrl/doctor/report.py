"""The doctor's report.md: one line for a healthy run; otherwise each finding, most severe first,
with its step range, evidence, the change most likely to help, and example samples (best, worst
and longest completion of the finding's steps, from samples.jsonl)."""

from __future__ import annotations

from .findings import Finding
from .run import RunData, fmt

TEXT_MAX = 160
"""Longest prompt or completion quoted in the report (the rest is cut with '...')."""


def _quote(text: object) -> str:
    s = " ".join(str(text).split())  # one line
    s = s if len(s) <= TEXT_MAX else s[:TEXT_MAX] + "..."
    return "`" + s.replace("`", "'") + "`" if s else "(empty)"


def _reward(row: dict) -> float | None:
    value = row.get("reward")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


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
    lines = [f"## {i}. {f.title} (steps {fmt(f.steps[0])}-{fmt(f.steps[1])})", "",
             f"Detector `{f.detector}`, severity {fmt(f.severity)} (1 = at its threshold).", ""]
    lines += [f"- {e}" for e in f.evidence]
    lines += ["", f"**Change:** {f.advice}", ""]
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


def render(run: RunData, findings: list[Finding], detectors: int, changed: dict[str, float]) -> str:
    """The report's markdown text."""
    steps = run.steps
    where = f"steps {fmt(steps[0])}-{fmt(steps[-1])}"
    tuned = ("; thresholds changed: " + ", ".join(f"{k}={fmt(v)}" for k, v in changed.items())) if changed else ""
    if not findings:
        return f"healthy: {run.path}: no problem found over {where} ({detectors} detectors{tuned}).\n"
    head = [f"# steadyrl doctor: {run.path}", "",
            f"{len(findings)} problem(s) found over {where} ({len(steps)} training steps, {len(run.samples)} "
            f"logged samples, {detectors} detectors{tuned}), most severe first:", ""]
    head += [f"{i}. {f.title} (`{f.detector}`, steps {fmt(f.steps[0])}-{fmt(f.steps[1])})"
             for i, f in enumerate(findings, 1)]
    body = [line for i, f in enumerate(findings, 1) for line in _finding(i, f, run)]
    return "\n".join([*head, "", *body]).rstrip() + "\n"
