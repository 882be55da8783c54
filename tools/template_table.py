"""Write the table of real chat templates x modes -> verdict into docs/agents.md.

    python tools/template_table.py            # rewrite the table
    python tools/template_table.py --check    # exit 1 if the table is out of date

Each row is a template published with a model, as vendored by llama.cpp in the llama-cpp-python
sdist (downloaded once and cached, see tests/support_realtemplates.py; every template of it, the
family of those the suite does not name read off the template: tests/support_sdist.py), with tools or with user-role
observations; each ``rollout.multi_turn.mode`` column is one conformance case
(tests/support_conformance.py): ``exact`` (the probe accepts and the scripted episode is exact in
that mode's terms), ``refused: ...`` (the probe's reason), or ``ACCEPTED, NOT EXACT`` (a bug). The
table sits between two marker lines of the page. A second table, between its own markers, holds the
templates other packages on the index publish (vllm's examples, TRL's and axolotl's training
templates; tests/support_pypi.py), deduplicated against each other and the sdist.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

PAGE = REPO / "docs" / "agents.md"
START, END = "<!-- template-table:start -->", "<!-- template-table:end -->"
PYPI_START, PYPI_END = "<!-- pypi-template-table:start -->", "<!-- pypi-template-table:end -->"

_BEHAVIOURS = (  # (a phrase of the probe's message, what the table says)
    ("ignores tools=", "the template does not show the tools"),
    ("cannot render", "the template drops the observation role"),
    ("drops their <think> blocks", "drops the reasoning of earlier turns"),
    ("drops the reasoning", "drops the reasoning the model writes"),
    ("once an assistant turn follows", "re-renders the turn before once a turn follows"),
    ("in its generation prompt differently", "its generation prompt starts a turn unlike the rendered turn"),
    ("renders earlier turns differently", "re-renders earlier turns"),
    ("renders the conversation differently once", "re-renders earlier turns"),
    ("does not close an assistant turn", "closes turns with a token that does not stop generation"),
    ("does not read back", "the parser cannot read the template's calls"),
    ("does not start an assistant turn with its generation prompt", "its turns do not start with its generation prompt"),
    ("does not show the content", "the template drops the observation"),
    ("failed to render", "the template raises"),
    ("does not render the turn the model wrote", "no reading of the sampled turn renders as written"),
    ("writes a call outside the assistant turn", "the template writes calls outside the sampled turn"),
)


def short(verdict: str) -> str:
    """The table's words for a probe verdict: ``exact`` or ``refused: behaviour (fix)``."""
    if verdict == "exact":
        return "exact"
    what = next((label for phrase, label in _BEHAVIOURS if phrase in verdict), "refused")
    if what == "the template raises":
        raised = re.search(r"failed to render [^:]*: (\w+: .{0,60})", verdict)
        what += f" ({raised.group(1).rstrip()}...)" if raised else ""
    fixes = re.search(r"What would handle it: (.*)", verdict)
    named = [re.sub(r" \(.*", "", f.replace("rollout.multi_turn.mode: ", "")).replace(
        "observations with the 'tool' role", "observation_role: tool").replace("data.chat_template_kwargs.", "")
        for f in (fixes.group(1).split("; ") if fixes else []) if "none found" not in f]
    return f"refused: {what}" + (f"; works with {', '.join(named)}" if named else "")


def cell(c) -> str:
    """A case in the table: exact, refused (why), or accepted although not exact."""
    if c.verdict == "exact":
        return "exact" if c.episode == "exact" else "**ACCEPTED, NOT EXACT**"
    return short(c.verdict).replace("|", "\\|")


def picks(by_mode: dict) -> str:
    """What ``rollout.multi_turn.mode: auto`` runs: single when exact, else stepwise when exact, else refused."""
    return next((m for m in ("single", "stepwise") if by_mode[m].verdict == "exact"), "refused")


def counts(cases) -> dict[str, int]:
    """Cases handled exactly, refused, and accepted although not exact (must be 0)."""
    out = {"exact": 0, "refused": 0, "wrong": 0}
    for _, c in cases:
        out["refused" if c.verdict != "exact" else "exact" if c.episode == "exact" else "wrong"] += 1
    return out


def table(cases, skipped: dict | None = None) -> str:
    rows = ["| model (template file) | observations | `single` | `stepwise` | `as_sampled` | `auto` runs | "
            "parser (`auto`) | call round trip |", "|---|---|---|---|---|---|---|---|"]
    grouped: dict = {}
    for family, c in cases:
        grouped.setdefault((c.family, c.mode), (family, {}))[1][c.turn_mode] = c
    for (name, mode), (family, by_mode) in grouped.items():
        trip = {True: "yes", False: "**no**", None: "-"}[by_mode["single"].round_trip]
        rows.append(f"| {name} (`{family.template}`) | {mode} | {cell(by_mode['single'])} | "
                    f"{cell(by_mode['stepwise'])} | {cell(by_mode['as_sampled'])} | {picks(by_mode)} | "
                    f"`{by_mode['single'].parser}` | {trip} |")
    n = counts(cases)
    rows.append(f"\n{len(cases)} cases ({len(grouped)} template rows x 3 modes): {n['exact']} handled exactly, "
                f"{n['refused']} refused with the reason, {n['wrong']} accepted although not exact.")
    if skipped:
        rows.append("\nLeft out (no family can be read off the template): " + "; ".join(
            f"`{name}`: {why}" for name, why in sorted(skipped.items())).replace("|", "\\|") + ".")
    return "\n".join(rows)


def page(cases, text: str, skipped: dict | None = None, start: str = START, end: str = END,
         duplicates: dict | None = None) -> str:
    """``text`` with the table of ``cases`` between the ``start`` and ``end`` marker lines."""
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    body = table(cases, skipped)
    if duplicates:
        body += "\n\nThe same text as another template (one case, named after where it is found first): " + "; ".join(
            f"`{name}` = `{same}`" for name, same in sorted(duplicates.items())) + "."
    return f"{head}{start}\n{body}\n{end}{tail}"


def pypi_page(cases, text: str, skipped: dict, duplicates: dict) -> str:
    """``text`` with the second corpus's table (tests/support_pypi.py)."""
    return page(cases, text, skipped, PYPI_START, PYPI_END, duplicates)


def all_cases():
    """(every template of the sdist's cases, {template left out: why}) (tests/support_sdist.py)."""
    from support_conformance import MODES, TURN_MODES, evaluate
    from support_realtemplates import template_dir
    from support_sdist import sdist_families

    templates = template_dir()
    families, skipped = sdist_families(templates)
    return [(f, evaluate(f, mode, templates, turn_mode=tm)) for f in families for mode in MODES
            for tm in TURN_MODES], skipped


def pypi_cases():
    """(every case of the templates other packages publish, {left out: why}, {duplicate: the same})."""
    from support_conformance import MODES, TURN_MODES, evaluate
    from support_pypi import pypi_families, pypi_templates

    folder, duplicates = pypi_templates()
    families, skipped = pypi_families(folder)
    return [(f, evaluate(f, mode, folder, turn_mode=tm)) for f in families for mode in MODES
            for tm in TURN_MODES], skipped, duplicates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/agents.md's table is stale")
    args = parser.parse_args()
    text = PAGE.read_text()
    cases, skipped = all_cases()
    more, more_skipped, duplicates = pypi_cases()
    new = pypi_page(more, page(cases, text, skipped), more_skipped, duplicates)
    if args.check:
        if new != text:
            print("docs/agents.md's template table is stale: run python tools/template_table.py")
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
