"""Model-written text made safe to print on a terminal or write into a report.

A completion is hostile input: ``\\x1b]52;c;...\\x07`` writes the reader's clipboard, ``\\x1b[2J``
clears the screen, ``\\u202e`` reverses what follows, and a line break in a quoted value makes a
line of its own in report.md. :func:`printable` shows every such character as a visible escape
(``\\x1b``, ``\\u202e``), keeping only the layout characters asked for (``\\n`` and ``\\t`` by
default). One regular-expression pass: linear in the text. Used wherever steadyrl prints model
text or a run's saved values: the doctor's report (console and report.md), the tool demo's
transcript, reward tracebacks, the run's config values quoted in a report.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                      "\ud800-\udfff\n\t]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, keep: str = "\n\t") -> str:
    """``str(text)`` with control, format and lone-surrogate characters shown as escapes; the
    characters in ``keep`` (default newline and tab) are left as they are."""
    text = text if isinstance(text, str) else str(text)
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)
