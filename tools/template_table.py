"""Write the table of real chat templates x modes -> verdict into docs/agents.md.

    python tools/template_table.py            # rewrite the table
    python tools/template_table.py --check    # exit 1 if the table is out of date

Each row is one conformance case (tests/support_conformance.py) on a template published with a
model, as vendored by llama.cpp in the llama-cpp-python sdist (downloaded once and cached, see
tests/support_realtemplates.py). The table sits between two marker lines of the page.
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

_BEHAVIOURS = (  # (a phrase of the probe's message, what the table says)
    ("ignores tools=", "the template does not show the tools"),
    ("cannot render", "the template drops the observation role"),
    ("drops their <think> blocks", "drops the reasoning of earlier turns"),
    ("drops the reasoning", "drops the reasoning the model writes"),
    ("once an assistant turn follows", "re-renders the turn before once a turn follows"),
    ("in its generation prompt differently", "its generation prompt starts a turn unlike the rendered turn"),
    ("renders earlier turns differently", "re-renders earlier turns"),
    ("does not close an assistant turn", "closes turns with a token that does not stop generation"),
    ("does not read back", "the parser cannot read the template's calls"),
    ("failed to render", "the template raises"),
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
    named = [f for f in (fixes.group(1).split("; ") if fixes else []) if "per-turn samples" not in f]
    return f"refused: {what}" + (f"; works with {', '.join(named)}" if named else "")


def table(cases) -> str:
    rows = ["| model (template file) | mode | start-up probe | scripted episode vs `apply_chat_template` | "
            "parser (`auto`) | call round trip |", "|---|---|---|---|---|---|"]
    for family, c in cases:
        episode = c.episode if c.episode == "exact" else ("not exact" if c.episode.startswith("differs") else
                                                          "fails (template error)")
        trip = {True: "yes", False: "**no**", None: "-"}[c.round_trip]
        verdict = short(c.verdict).replace("|", "\\|")
        rows.append(f"| {c.family} (`{family.template}`) | {c.mode} | {verdict} | {episode} | "
                    f"`{c.parser}` | {trip} |")
    return "\n".join(rows)


def page(cases, text: str) -> str:
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(cases)}\n{END}{tail}"


def all_cases():
    from support_conformance import MODES, evaluate
    from support_realtemplates import FAMILIES, template_dir

    templates = template_dir()
    return [(f, evaluate(f, mode, templates)) for f in FAMILIES for mode in MODES]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/agents.md's table is stale")
    args = parser.parse_args()
    text = PAGE.read_text()
    new = page(all_cases(), text)
    if args.check:
        if new != text:
            print("docs/agents.md's template table is stale: run python tools/template_table.py")
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
