"""Scoring a batch with several reward functions: ``RewardSpec``, ``RewardScorer``, ``score_batch``.

Each reward function is called once per batch, under its own time limit (see
:mod:`steadyrl.rewards.runners` for how), all of them at the same time. For sample ``i``::

    scores_i = sum_f weight_f * r_f,i     if every function f returned a finite float for i
    scores_i = 0, valid_i = False         otherwise

A function fails a sample in one of four ways (the failure *kinds*, counted per function):

* ``exception``: it raised (or called ``sys.exit``), returned something that is not a list of
  ``float | None``, or returned a list of the wrong length - every sample of the batch;
* ``timeout``: it ran past ``timeout_s`` - every sample of the batch;
* ``none``: it returned ``None`` for the sample ("cannot score this one");
* ``nonfinite``: it returned NaN or +-inf for the sample.

Nothing a reward function does propagates out of :meth:`RewardScorer.score`: failures are counted,
the first traceback (or time-out message) of each function is kept in ``ScoreResult.errors`` for
the trainer to show once, and the affected samples leave the update through ``valid``.

Reward domains (docs/rewards.md): with ``RewardScorer(..., domain_key="domain")`` a spec whose
``domains`` is set is called on the rows whose ``domain`` column holds one of those values, and
on no other row; the sum above then runs over the functions that apply to the row. A row outside
a function's domains has ``raw[name][i] = None`` and ``ScoreResult.applies(name)[i] = False``:
not applicable, never counted as a failure. A row no function applies to is invalid
(``ScoreResult.unrouted()``, the metric ``reward/unrouted``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..errors import ConfigError
from .loader import load_reward, reward_name
from .registry import RewardFn
from .runners import ISOLATIONS, InlineRunner, Isolation, Outcome, default_isolation, make_runner

__all__ = ["RewardSpec", "ScoreResult", "RewardScorer", "score_batch", "FAILURE_KINDS", "DEFAULT_TIMEOUT_S"]

FAILURE_KINDS: tuple[str, ...] = ("exception", "timeout", "none", "nonfinite")

DEFAULT_TIMEOUT_S = 60.0
"""Time limit of one reward-function call (one whole batch), in seconds."""

_RESERVED_COLUMNS = ("prompts", "completions")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass
class RewardSpec:
    """One reward function in the mix.

    ``timeout_s`` bounds one call (the whole batch); ``None`` waits forever. ``isolation`` is how
    the call is run and stopped (``"process"``, ``"thread"``, ``"inline"``; ``None``: the
    function's ``preferred_isolation`` when it has one - the model and server rewards do - else
    the scorer's default); ``"inline"`` has no time limit.
    """

    name: str
    fn: RewardFn
    weight: float = 1.0
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    isolation: Isolation | None = None
    domains: tuple[str, ...] | None = None  # None: every row; else rows whose domain is one of these

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ConfigError(f"reward name {self.name!r} must be a non-empty string without '/'")
        where = f"reward {self.name!r}"
        if not callable(self.fn):
            raise ConfigError(f"{where}: fn must be callable, got {type(self.fn).__name__}")
        if not _is_number(self.weight) or not math.isfinite(self.weight):
            raise ConfigError(f"{where}: weight={self.weight!r} must be a finite number")
        if self.timeout_s is not None and not (_is_number(self.timeout_s) and 0 < self.timeout_s < math.inf):
            raise ConfigError(f"{where}: timeout_s={self.timeout_s!r} must be seconds > 0, or None")
        if self.isolation is not None and self.isolation not in ISOLATIONS:
            valid = list(ISOLATIONS)
            raise ConfigError(f"{where}: isolation={self.isolation!r} must be one of {valid} or None")
        self.weight = float(self.weight)
        if self.domains is not None:
            if isinstance(self.domains, str) or not self.domains or not all(
                    isinstance(d, str) and d for d in self.domains):
                raise ConfigError(f"{where}: domains={self.domains!r} must be a non-empty list of domain names, "
                                  "or None for every row")
            self.domains = tuple(self.domains)
        if self.isolation is None:  # a model or server reward says where it runs best (docs/rewards.md)
            preferred = getattr(self.fn, "preferred_isolation", None)
            self.isolation = preferred if preferred in ISOLATIONS else None

    @classmethod
    def load(
        cls,
        spec: str,
        *,
        name: str | None = None,
        weight: float = 1.0,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        isolation: Isolation | None = None,
        **options,
    ) -> RewardSpec:
        """``load_reward(spec, **options)`` wrapped in a spec, named after the built-in or function."""
        fn = load_reward(spec, **options)
        return cls(name or reward_name(spec), fn, weight, timeout_s, isolation)


@dataclass
class ScoreResult:
    """Scores of one batch. ``raw[name]`` is what the function returned, converted to
    ``float | None`` (all ``None`` when the call failed), so NaN and inf are kept there."""

    names: list[str]
    weights: dict[str, float]
    raw: dict[str, list[float | None]]
    scores: torch.Tensor  # float64 [B] (huge finite rewards stay finite), 0 where invalid
    valid: torch.Tensor  # bool [B]
    failures: dict[str, dict[str, int]]  # name -> kind -> samples
    errors: dict[str, str] = field(default_factory=dict)  # name -> traceback / time-out message
    elapsed_s: dict[str, float] = field(default_factory=dict)
    # "reward/<name>/<metric>" -> value: what reward objects with a metrics() method reported
    metrics: dict[str, float] = field(default_factory=dict)
    # reward domains: each row's domain (None when the scorer has no domain_key), and the domains
    # each function is restricted to (a name missing or None: every row)
    domains: list | None = None
    routes: dict[str, tuple[str, ...] | None] = field(default_factory=dict)

    def applies(self, name: str) -> list[bool]:
        """Where function ``name`` applies: every row, unless it is restricted to some domains."""
        return _applies(self.routes.get(name), self.domains, self.batch_size)

    def unrouted(self) -> list[bool]:
        """Rows no function applies to (a domain with no reward): invalid, scored 0."""
        if self.domains is None or not self.names:
            return [False] * self.batch_size
        masks = [self.applies(name) for name in self.names]
        return [not any(m[i] for m in masks) for i in range(self.batch_size)]

    @property
    def batch_size(self) -> int:
        return int(self.scores.shape[0])

    def function_valid(self, name: str) -> list[bool]:
        """Where function ``name`` returned a finite float."""
        return [x is not None and math.isfinite(x) for x in self.raw[name]]

    def failed(self, name: str) -> int:
        """Samples function ``name`` failed on (all kinds)."""
        return sum(self.failures[name].values())

    def failure_kinds(self, name: str) -> list[str | None]:
        """Per sample, how function ``name`` failed on it (a kind of ``FAILURE_KINDS``), or None.
        A call that failed as a whole gives every sample its kind."""
        applies = self.applies(name)
        size = sum(applies)
        whole = next((kind for kind, n in self.failures[name].items()
                      if n == size and n > 0 and kind in ("exception", "timeout")), None)
        return [None if not ok else whole or ("none" if x is None else "nonfinite" if not math.isfinite(x) else None)
                for x, ok in zip(self.raw[name], applies)]

    def select(self, rows: list[int]) -> "ScoreResult":
        """The result of rows ``rows`` only, in that order (failures counted over them)."""
        index = torch.tensor(rows, dtype=torch.long)
        failures = {}
        for name in self.names:
            kinds = self.failure_kinds(name)
            failures[name] = {kind: sum(kinds[i] == kind for i in rows) for kind in FAILURE_KINDS}
        return ScoreResult(names=list(self.names), weights=dict(self.weights),
                           raw={name: [values[i] for i in rows] for name, values in self.raw.items()},
                           scores=self.scores[index], valid=self.valid[index], failures=failures,
                           errors=dict(self.errors), elapsed_s=dict(self.elapsed_s),
                           domains=None if self.domains is None else [self.domains[i] for i in rows],
                           routes=dict(self.routes))


def _applies(route: tuple[str, ...] | None, domains: list | None, size: int) -> list[bool]:
    if route is None or domains is None:
        return [True] * size
    return [d is not None and str(d) in route for d in domains]


class _NotCalled:
    """A function with no row of its domains in the batch is not called: an empty result."""

    def wait(self, timeout_s: float | None) -> Outcome:
        return Outcome("ok", [], None, 0.0)


def _check_specs(specs: Sequence[RewardSpec]) -> list[RewardSpec]:
    specs = list(specs)
    if not specs:
        raise ConfigError("rewards: at least one reward function is needed, got none")
    for spec in specs:
        if not isinstance(spec, RewardSpec):
            raise ConfigError(f"rewards: expected RewardSpec objects, got {type(spec).__name__}")
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"rewards: reward names must be distinct (they name metrics); repeated: {dupes}")
    return specs


def _check_batch(prompts, completions, columns) -> dict[str, list]:
    size = len(completions)
    if len(prompts) != size:
        raise ValueError(f"{len(prompts)} prompts for {size} completions: give one prompt per completion")
    columns = dict(columns or {})
    for key in _RESERVED_COLUMNS:
        if key in columns:
            raise ValueError(f"a column may not be named {key!r}: it would clash with that argument")
    for key, values in columns.items():
        if len(values) != size:
            raise ValueError(f"column {key!r} has {len(values)} values for a batch of {size}")
    return columns


def _assemble(specs: list[RewardSpec], outcomes: list, size: int, rows: list[list[int]] | None = None,
              domains: list | None = None) -> ScoreResult:
    """``rows[f]``: the batch rows function ``f`` was called on (all of them without domains)."""
    rows = rows or [list(range(size)) for _ in specs]
    raw, failures, errors, elapsed = {}, {}, {}, {}
    total = [0.0] * size
    ok = [True] * size
    for spec, out, mine in zip(specs, outcomes, rows):
        counts = dict.fromkeys(FAILURE_KINDS, 0)
        status, scores, error = out.status, out.scores, out.error
        if status == "ok" and len(scores) != len(mine):
            status = "exception"
            error = f"returned {len(scores)} scores for a batch of {len(mine)} (the whole batch is invalid)"
        full: list[float | None] = [None] * size  # None outside ``mine``: not applicable
        if status != "ok":
            counts[status], errors[spec.name] = len(mine), error
            for i in mine:
                ok[i] = False
        else:
            for i, x in zip(mine, scores):
                full[i] = x
                if x is not None and math.isfinite(x):
                    total[i] += spec.weight * x
                    continue
                counts["none" if x is None else "nonfinite"] += 1
                ok[i] = False
        raw[spec.name], failures[spec.name], elapsed[spec.name] = full, counts, out.elapsed_s
    covered = {i for mine in rows for i in mine}
    for i in range(size):  # a row no function applies to (a domain with no reward) has no score
        if i not in covered:
            ok[i] = False
    combined = torch.tensor(total, dtype=torch.float64)
    for i in torch.nonzero(~torch.isfinite(combined)).flatten().tolist():
        # finite scores whose weighted sum overflows: blame the largest term, so it is counted
        culprit = max(specs, key=lambda sp: abs(sp.weight * (raw[sp.name][i] or 0.0)))
        failures[culprit.name]["nonfinite"] += 1
        ok[i] = False
    valid = torch.tensor(ok, dtype=torch.bool)
    combined = torch.where(valid, combined, torch.zeros_like(combined))
    return ScoreResult(
        names=[s.name for s in specs],
        weights={s.name: s.weight for s in specs},
        raw=raw,
        scores=combined,
        valid=valid,
        failures=failures,
        errors=errors,
        elapsed_s=elapsed,
        domains=domains,
        routes={s.name: s.domains for s in specs} if domains is not None else {},
    )


class RewardScorer:
    """Scores batches with a fixed set of reward functions, keeping their workers between batches.

    ``isolation`` is the default for specs that do not set their own (``None``: ``"process"`` on
    Linux, ``"thread"`` elsewhere). Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, specs: Sequence[RewardSpec], *, isolation: Isolation | None = None,
                 domain_key: str | None = None):
        if isolation is not None and isolation not in ISOLATIONS:
            raise ConfigError(f"isolation={isolation!r} must be one of {list(ISOLATIONS)} or None")
        self.specs = _check_specs(specs)
        self.domain_key = domain_key
        restricted = [s.name for s in self.specs if s.domains is not None]
        if restricted and domain_key is None:
            raise ConfigError(f"rewards {restricted} are restricted to domains, but data.domain_key is null: "
                              "name the column that holds each row's domain")
        default = isolation or default_isolation()
        self.isolations = [s.isolation or default for s in self.specs]
        self._runners = [make_runner(s.fn, iso) for s, iso in zip(self.specs, self.isolations)]

    def score(self, prompts: Sequence, completions: Sequence, columns: dict | None = None) -> ScoreResult:
        """Call every reward function once on the batch; never raises for a function's failure."""
        columns = _check_batch(prompts, completions, columns)
        size = len(completions)
        domains = None
        if self.domain_key is not None:
            if self.domain_key not in columns:
                raise ValueError(f"data.domain_key = {self.domain_key!r}, but the batch has no such column; "
                                 f"columns: {sorted(columns)}")
            domains = list(columns[self.domain_key])
        rows = [[i for i, ok in enumerate(_applies(s.domains, domains, size)) if ok] for s in self.specs]
        # Inline functions run last, while the isolated ones work in parallel.
        order = sorted(range(len(self.specs)), key=lambda i: isinstance(self._runners[i], InlineRunner))
        calls = {}
        for i in order:  # each function gets its own copies of its own rows: none sees another's
            mine = rows[i]
            if not mine:
                calls[i] = _NotCalled()
                continue
            cols = {k: [v[j] for j in mine] for k, v in columns.items()}
            calls[i] = self._runners[i].start([prompts[j] for j in mine], [completions[j] for j in mine], cols)
        outcomes = [calls[i].wait(spec.timeout_s) for i, spec in enumerate(self.specs)]
        result = _assemble(self.specs, outcomes, size, rows, domains)
        result.metrics = self._reported_metrics()
        return result

    def _reported_metrics(self) -> dict[str, float]:
        """``reward/<name>/<key>`` from each function's optional ``metrics()`` method (only the
        trainer's own object is asked: under ``process`` isolation it is not the one that scores)."""
        out: dict[str, float] = {}
        for spec, isolation in zip(self.specs, self.isolations):
            report = getattr(spec.fn, "metrics", None)
            if isolation == "process" or not callable(report):
                continue
            try:
                values = report()
                out.update({f"reward/{spec.name}/{k}": float(v) for k, v in values.items()})
            except Exception:  # noqa: BLE001 - a metrics report never fails a step
                continue
        return out

    def close(self) -> None:
        """Stop the worker processes (idle ones exit at once)."""
        for runner in self._runners:
            runner.close()

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def score_batch(
    specs: Sequence[RewardSpec],
    prompts: Sequence,
    completions: Sequence,
    columns: dict | None = None,
    *,
    isolation: Isolation | None = None,
    domain_key: str | None = None,
) -> ScoreResult:
    """Score one batch (a one-off :class:`RewardScorer`; a training loop keeps one instead, so
    that worker processes are forked once, not per batch)."""
    with RewardScorer(specs, isolation=isolation, domain_key=domain_key) as scorer:
        return scorer.score(prompts, completions, columns)
