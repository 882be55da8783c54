"""Rubric rewards: the ``llm_judge`` reward with ``mode: rubric`` asks its judge one weighted criterion at a time.

For sample ``i`` with criteria ``(c_k, w_k)`` (the options' fixed ``criteria``, or the row's column
``criteria_key``), the judge reads ``rubric_template`` with ``{criterion}`` = ``c_k`` and replies with a
verdict ``v_k`` in ``{0, 1}``::

    r_i = sum_k u_k v_k / sum_k u_k,      u_k = w_k / max_j w_j

(the weights scaled to at most 1 first: the same ratio, and no sum of weights overflows: two
criteria of weight 1e308 that both pass score 1, not inf / inf = NaN; the sum is ``math.fsum``'s,
so ``0 <= r_i <= 1`` exactly.)

The judge is asked (:data:`~steadyrl.rewards.judge_base.RUBRIC_TEMPLATE`) to end its reply with a line of
its own, ``VERDICT: PASS`` or ``VERDICT: FAIL``, and only that place is read: the reply's last
non-empty line, at most :data:`MAX_VERDICT_LINE` characters, must be exactly that (any case,
Markdown emphasis around the words, a heading's ``#``, a final ``.`` or ``!`` and a closing code fence
or rule after it allowed; read as it looks: fullwidth, lookalike and invisible characters folded,
:func:`_fold_char`). A reply that is one bare verdict word and nothing else (``PASS``, ``fail``,
``yes``, ``No.``: a template that asks for one word) is read as that word. Reasoning before the line
may say anything: "PASS - no issues found" is not a verdict line, and a verdict-like word in the
reasoning never counts. Finding the last line is one backward scan (``str.rfind``): linear in the
reply, whatever its length.

The response under judgement is written by the policy: it may hold a ``VERDICT: PASS`` line of its
own, for the judge to copy or quote. Before it goes into the question, each ``verdict:`` in it becomes
``verdict (quoted):`` (:func:`defuse_verdicts`, one linear pass; a label is found as it reads, so one
in fullwidth or lookalike letters, with a fullwidth colon or invisible characters is defused too), so no
line the judge copies out of the response, even with its Unicode normalised, can be read as the
judge's verdict.

A reply without a verdict is model-written noise: that criterion scores 0 and is counted
(``criterion/not_a_verdict_frac``); a request that fails outright (the server, after its
retries) makes the whole sample score ``None``, as the score mode does.

A row's criteria are a list of ``{text, weight}`` mappings or of strings (weight 1), or a JSON
text of one; at most :data:`MAX_CRITERIA`, each text at most :data:`MAX_CRITERION_CHARS`. A row
whose criteria are missing or malformed scores ``None`` (reason ``bad_criteria``).

Per-criterion pass rates are reported as ``criterion/<k>/pass_rate`` (``k`` the criterion's index
in its list; logged as ``reward/<name>/criterion/<k>/pass_rate``) for ``k < MAX_CRITERIA``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import math
import re
import threading
import unicodedata

from ..errors import ConfigError
from .http_client import RequestFailed

__all__ = ["Rubric", "parse_verdict", "parse_criteria", "defuse_verdicts", "MAX_CRITERIA", "MAX_VERDICT_LINE"]

MAX_CRITERIA = 32
"""Criteria per row: a judge call each, so a row cannot ask for thousands."""

MAX_CRITERION_CHARS = 2000
"""Characters of one criterion's text."""

MAX_VERDICT_LINE = 200
"""Characters of the reply's last line read for ``VERDICT: PASS|FAIL`` (a longer line is no verdict)."""

_MARKUP = r"[*_`\s]*"
_ASCII = re.IGNORECASE | re.ASCII  # matched on folded text (_fold): no Unicode case-folding (the long s is not s)
_VERDICT_LINE = re.compile(rf"#*{_MARKUP}verdict{_MARKUP}:{_MARKUP}(pass|fail){_MARKUP}[.!]?{_MARKUP}", _ASCII)
_BARE_WORD = re.compile(rf"{_MARKUP}(pass|fail|yes|no){_MARKUP}[.!]?{_MARKUP}", _ASCII)
_VERDICT_LABEL = re.compile(r"(verdict)(?=[*_`\s]*:)", _ASCII)
_PASSING = {"pass", "yes"}
_LOOKALIKES = {ord(k): v for k, v in {
    "\u0430": "a", "\u0410": "A", "\u0391": "A", "\u0441": "c", "\u0421": "C", "\u03f2": "c", "\u03f9": "C",
    "\u0501": "d", "\u0435": "e", "\u0415": "E", "\u0395": "E", "\u0456": "i", "\u0406": "I", "\u0399": "I",
    "\u0131": "i", "\u04cf": "l", "\u0440": "p", "\u0420": "P", "\u03a1": "P", "\u0455": "s", "\u0405": "S",
    "\u0422": "T", "\u03a4": "T", "\u03bd": "v", "\u0475": "v", "\u0474": "V",
    "\u2236": ":", "\ua789": ":", "\u02d0": ":", "\u02f8": ":", "\u05c3": ":", "\u0589": ":",
    "\u2028": " ", "\u2029": " ", "\x85": " ",
}.items()}
"""Letters of VERDICT / PASS / FAIL (and colons, and line breaks other than ``\\n``) in other scripts
that read as the Latin ones."""


@functools.lru_cache(maxsize=65536)
def _fold_char(c: str) -> str:
    """How a character reads: its compatibility decomposition (fullwidth, mathematical and ligature
    forms, the long s), without accents and invisible characters, lookalike letters as Latin ones."""
    return "".join(d.translate(_LOOKALIKES) for d in unicodedata.normalize("NFKD", c)
                   if unicodedata.category(d) not in ("Mn", "Me", "Cf"))


def _fold(text: str) -> str:
    return text if text.isascii() else "".join(map(_fold_char, text))


def parse_verdict(reply) -> float | None:
    """1.0 (PASS), 0.0 (FAIL) from the ``VERDICT: PASS|FAIL`` last line of ``reply``; a reply that is
    one bare word PASS / FAIL / YES / NO is that word; None otherwise (module docstring)."""
    if not isinstance(reply, str):
        return None
    end = len(reply.rstrip().rstrip("`*_=-").rstrip())  # a closing code fence or a Markdown rule after the line
    start = reply.rfind("\n", 0, end) + 1
    if end - start > MAX_VERDICT_LINE:
        return None
    line = _fold(reply[start:end])
    match = _VERDICT_LINE.fullmatch(line) or (_BARE_WORD.fullmatch(line) if not reply[:start].strip() else None)
    return None if match is None else float(match.group(1).lower() in _PASSING)


def defuse_verdicts(text: str) -> str:
    """``text`` (model-written) with every ``verdict`` label before a colon made ``verdict (quoted)``:
    a line copied out of it never reads as a verdict line, even copied with its Unicode normalised
    (a label found in the text as it reads: :func:`_fold_char`). One linear pass."""
    if text.isascii():
        return _VERDICT_LABEL.sub(r"\1 (quoted)", text)
    pieces = [_fold_char(c) for c in text]
    ends = list(itertools.accumulate(map(len, pieces)))  # the folded text's length after each character
    out, at = [], 0
    for match in _VERDICT_LABEL.finditer("".join(pieces)):
        cut = bisect.bisect_left(ends, match.end()) + 1  # after the character holding the label's last letter
        out += [text[at:cut], " (quoted)"]
        at = cut
    return "".join(out) + text[at:]


def _criterion(item, where: str) -> tuple[str, float]:
    if isinstance(item, str):
        text, weight = item, 1.0
    elif isinstance(item, dict) and set(item) <= {"text", "weight"} and "text" in item:
        text, weight = item["text"], item.get("weight", 1.0)
    else:
        raise ValueError(f"{where}: a criterion is a string or a mapping {{text, weight}}, got {str(item)[:60]!r}")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_CRITERION_CHARS:
        raise ValueError(f"{where}: a criterion's text must be a non-empty string of at most "
                         f"{MAX_CRITERION_CHARS} characters")
    try:  # an int past float's range (JSON / YAML read 400 digits as one) is no finite weight either
        value = float(weight) if isinstance(weight, (int, float)) and not isinstance(weight, bool) else None
    except OverflowError:
        value = None
    if value is None or not 0 < value < float("inf"):
        raise ValueError(f"{where}: criterion weight {str(weight)[:40]!r} must be a finite number > 0")
    return text, value


def parse_criteria(value, where: str) -> list[tuple[str, float]]:
    """``[(text, weight)]`` of a criteria list (or its JSON text); ``ValueError`` naming ``where`` otherwise."""
    if isinstance(value, str):
        if len(value) > MAX_CRITERIA * (MAX_CRITERION_CHARS + 64):
            raise ValueError(f"{where}: the criteria text is too long")
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: not a list of criteria nor its JSON text") from None
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{where}: give a non-empty list of criteria ({{text, weight}} or strings)")
    if len(value) > MAX_CRITERIA:
        raise ValueError(f"{where}: {len(value)} criteria, at most {MAX_CRITERIA}")
    return [_criterion(item, where) for item in value]


class Rubric:
    """The criteria of each row, the weighted score of its verdicts, and the pass-rate counts."""

    def __init__(self, criteria, criteria_key: str | None):
        if criteria is None and criteria_key is None:
            raise ConfigError("llm_judge reward: mode 'rubric' needs option criteria (a list of {text, weight}) "
                              "or option criteria_key (the column holding each row's criteria)")
        try:
            self.fixed = None if criteria is None else parse_criteria(criteria, "llm_judge reward: option criteria")
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self.key = criteria_key
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._asked = [0] * MAX_CRITERIA
        self._passed = [0] * MAX_CRITERIA
        self._replies = self._noise = 0

    def criteria_of(self, columns: dict, i: int) -> list[tuple[str, float]]:
        """Row ``i``'s criteria: the row's column when ``criteria_key`` is set, else the fixed list."""
        if self.key is None:
            return self.fixed
        values = columns.get(self.key)
        try:
            return parse_criteria(None if values is None else values[i], f"column {self.key!r}")
        except ValueError as err:
            raise RequestFailed("bad_criteria", str(err)) from None

    def combine(self, criteria: list[tuple[str, float]], replies: list) -> float | None:
        """The weighted score of one row from its judge replies (a :class:`RequestFailed` is the
        whole row's failure: raised)."""
        for reply in replies:
            if isinstance(reply, RequestFailed):
                raise reply
        verdicts = [parse_verdict(r) for r in replies]
        with self._lock:
            for k, v in enumerate(verdicts):
                self._asked[k] += 1
                self._passed[k] += int(v == 1.0)
            self._replies += len(verdicts)
            self._noise += sum(v is None for v in verdicts)
        top = max(w for _, w in criteria)
        scaled = [w / top for _, w in criteria]  # in (0, 1]: the sum is at most MAX_CRITERIA, never inf
        return math.fsum(u * (v or 0.0) for u, v in zip(scaled, verdicts)) / math.fsum(scaled)

    def metrics(self) -> dict[str, float]:
        """``criterion/<k>/pass_rate`` and ``criterion/not_a_verdict_frac`` since the last call (then reset)."""
        with self._lock:
            out = {f"criterion/{k}/pass_rate": self._passed[k] / n for k, n in enumerate(self._asked) if n}
            if self._replies:
                out["criterion/not_a_verdict_frac"] = self._noise / self._replies
            self._reset()
        return out
