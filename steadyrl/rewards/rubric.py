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
Markdown emphasis around the words allowed). A reply that is one bare verdict word and nothing else
(``PASS``, ``fail``, ``yes``, ``No.``: a template that asks for one word) is read as that word.
Reasoning before the line may say anything: "PASS - no issues found" is not a verdict line, and
a verdict-like word in the reasoning never counts. Finding the last line is one backward scan
(``str.rfind``): linear in the reply, whatever its length.

The response under judgement is written by the policy: it may hold a ``VERDICT: PASS`` line of its
own, for the judge to copy or quote. Before it goes into the question, each ``verdict:`` in it becomes
``verdict (quoted):`` (:func:`defuse_verdicts`, one linear pass), so no line the judge copies out of
the response can be read as the judge's verdict.

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

import json
import math
import re
import threading

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
_VERDICT_LINE = re.compile(rf"{_MARKUP}verdict{_MARKUP}:{_MARKUP}(pass|fail){_MARKUP}\.?{_MARKUP}", re.IGNORECASE)
_BARE_WORD = re.compile(rf"{_MARKUP}(pass|fail|yes|no){_MARKUP}\.?{_MARKUP}", re.IGNORECASE)
_VERDICT_LABEL = re.compile(r"(verdict)(?=[*_`\s]*:)", re.IGNORECASE)
_PASSING = {"pass", "yes"}


def parse_verdict(reply) -> float | None:
    """1.0 (PASS), 0.0 (FAIL) from the ``VERDICT: PASS|FAIL`` last line of ``reply``; a reply that is
    one bare word PASS / FAIL / YES / NO is that word; None otherwise (module docstring)."""
    if not isinstance(reply, str):
        return None
    end = len(reply.rstrip())
    start = reply.rfind("\n", 0, end) + 1
    if end - start > MAX_VERDICT_LINE:
        return None
    line = reply[start:end]
    match = _VERDICT_LINE.fullmatch(line) or (_BARE_WORD.fullmatch(line) if not reply[:start].strip() else None)
    return None if match is None else float(match.group(1).lower() in _PASSING)


def defuse_verdicts(text: str) -> str:
    """``text`` (model-written) with every ``verdict`` label before a colon made ``verdict (quoted)``:
    a line copied out of it never reads as a verdict line. One linear pass."""
    return _VERDICT_LABEL.sub(r"\1 (quoted)", text)


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
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < float("inf"):
        raise ValueError(f"{where}: criterion weight {weight!r} must be a finite number > 0")
    return text, float(weight)


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
