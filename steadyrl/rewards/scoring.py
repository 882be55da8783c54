"""Scoring a batch with several reward functions: ``RewardSpec``, ``RewardScorer``, ``score_batch``.

Each reward function scores a batch under its own time limit, all of them at the same time, one
chunk of ``chunk_size`` samples per call (default 1; see :mod:`steadyrl.rewards.runners` for how).
For sample ``i``::

    scores_i = sum_f weight_f * r_f,i     if every function f returned a finite float for i
    scores_i = 0, valid_i = False         otherwise

except that ``None`` from a function of your own, where another function scored the sample, means
"does not apply here" (TRL's multi-task idiom): the sum runs over the functions that scored it,
and ``ScoreResult.declined`` / ``applies`` say where. A sample no function scored is invalid.
``None`` from a built-in (a judge or server that failed, a gold answer that cannot be parsed) still
fails the sample.

A function fails a sample in one of four ways (the failure *kinds*, counted per function):

* ``exception``: it raised (or called ``sys.exit``), returned something that is not a list of
  ``float | None``, returned a list of the wrong length, or its worker died - every sample of
  that call (chunk), and in a worker that died also the samples not yet scored;
* ``timeout``: the batch ran past ``timeout_s`` - the samples not yet scored (those scored keep
  their scores);
* ``none``: it returned ``None`` for the sample ("cannot score this one");
* ``nonfinite``: it returned NaN or +-inf for the sample.

Nothing a reward function does propagates out of :meth:`RewardScorer.score`: failures are counted,
the first traceback (or time-out message) of each function is kept in ``ScoreResult.errors`` for
the trainer to show once, and the affected samples leave the update through ``valid``.

Each function receives the batch the way it expects it (:mod:`steadyrl.rewards.calling`):
steadyrl-style functions get text prompts and completions; TRL-style ones get, for a sample whose
prompt was a list of chat messages (``chat_prompts``), that list and the completion as
``[{"role": "assistant", "content": text}]`` (in a multi-turn episode: its messages after the
prompt, ``chat_completions``, as TRL's tool loop passes them), and ``completion_ids`` when given. A call the
function's signature cannot take is also kept apart in ``ScoreResult.call_errors``.

Reward domains (docs/rewards.md): with ``RewardScorer(..., domain_key="domain")`` a spec whose
``domains`` is set is called on the rows whose ``domain`` column holds one of those values, and
on no other row; the sum above then runs over the functions that apply to the row. A row outside
a function's domains has ``raw[name][i] = None`` and ``ScoreResult.applies(name)[i] = False``:
not applicable, never counted as a failure. A row no function applies to is invalid
(``ScoreResult.unrouted()``, the metric ``reward/unrouted``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from ..errors import ConfigError
from ..metrics import Count
from ..secrets import redact_text
from .calling import PlannedReward, call_error, chat_shape_hint, describe_call
from .loader import load_reward, reward_name
from .registry import RewardFn
from ..sandbox import Limits
from .runners import DEFAULT_CHUNK_SIZE, ISOLATIONS, InlineRunner, Isolation, Outcome, default_isolation, make_runner

if TYPE_CHECKING:
    import torch

__all__ = ["RewardSpec", "ScoreResult", "RewardScorer", "score_batch", "FAILURE_KINDS", "DEFAULT_TIMEOUT_S"]

FAILURE_KINDS: tuple[str, ...] = ("exception", "timeout", "none", "nonfinite")

DEFAULT_TIMEOUT_S = 60.0
"""Time limit of scoring one batch with one reward function (all its chunks), in seconds."""

_RESERVED_COLUMNS = ("prompts", "completions", "completion_ids")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass
class RewardSpec:
    """One reward function in the mix.

    ``timeout_s`` bounds the whole batch (all its chunks; at the limit the samples not yet scored
    fail); ``None`` waits forever. ``isolation`` is how the calls are run and stopped
    (``"process"``, ``"thread"``, ``"inline"``; ``None``: the function's ``preferred_isolation``
    when it has one - the model and server rewards do - else the scorer's default); ``"inline"``
    has no time limit. ``chunk_size`` samples go to one call (``None``: the whole batch).
    ``limits`` and ``env_passthrough`` apply to ``"process"`` isolation (:mod:`steadyrl.sandbox`).
    """

    name: str
    fn: RewardFn
    weight: float = 1.0
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    isolation: Isolation | None = None
    chunk_size: int | None = DEFAULT_CHUNK_SIZE
    limits: Limits = field(default_factory=Limits)
    env_passthrough: tuple[str, ...] = ()
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
        if self.chunk_size is not None and (isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int)
                                            or self.chunk_size < 1):
            raise ConfigError(f"{where}: chunk_size={self.chunk_size!r} must be an integer >= 1, or None (whole batch)")
        if not isinstance(self.limits, Limits):
            raise ConfigError(f"{where}: limits must be a steadyrl.sandbox.Limits, got {type(self.limits).__name__}")
        self.weight = float(self.weight)
        self.env_passthrough = tuple(self.env_passthrough)
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
        chunk_size: int | None = DEFAULT_CHUNK_SIZE,
        **options,
    ) -> RewardSpec:
        """``load_reward(spec, **options)`` wrapped in a spec, named after the built-in or function."""
        fn = load_reward(spec, **options)
        return cls(name or reward_name(spec), fn, weight, timeout_s, isolation, chunk_size)


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
    # the keys of ``metrics`` that are counts (reported as steadyrl.metrics.Count): summed over
    # processes and draws; the others are averaged (trainer/global_batch.merge_results)
    metric_counts: set[str] = field(default_factory=set)
    # name -> "fn(prompts, completions, solution=...): missing a required argument: 'solution'":
    # functions whose signature could not take the call (the whole batch failed with it)
    call_errors: dict[str, str] = field(default_factory=dict)

    # reward domains: each row's domain (None when the scorer has no domain_key), and the domains
    # each function is restricted to (a name missing or None: every row)
    domains: list | None = None
    routes: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    # name -> per row: the function returned None while another one scored the row (TRL's
    # multi-task idiom: it does not apply there); a name missing: nowhere
    declined: dict[str, list[bool]] = field(default_factory=dict)

    def applies(self, name: str) -> list[bool]:
        """Where function ``name`` applies: every row, unless it is restricted to some domains or
        declined the row (returned None where another function scored it)."""
        routed = _applies(self.routes.get(name), self.domains, self.batch_size)
        declined = self.declined.get(name)
        return routed if declined is None else [r and not d for r, d in zip(routed, declined)]

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
        import torch  # the scores are tensors; the checks before a run import none

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
                           routes=dict(self.routes), metrics=dict(self.metrics), metric_counts=set(self.metric_counts),
                           call_errors=dict(self.call_errors),
                           declined={k: [v[i] for i in rows] for k, v in self.declined.items()})


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


def _check_batch(prompts, completions, columns, completion_ids=None, chat_prompts=None,
                 chat_completions=None) -> dict[str, list]:
    size = len(completions)
    if len(prompts) != size:
        raise ValueError(f"{len(prompts)} prompts for {size} completions: give one prompt per completion")
    for name, given in (("completion_ids", completion_ids), ("chat_prompts", chat_prompts),
                        ("chat_completions", chat_completions)):
        if given is not None and len(given) != size:
            raise ValueError(f"{name} has {len(given)} entries for a batch of {size}")
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
    import torch  # the scores are tensors; the checks before a run import none

    rows = rows or [list(range(size)) for _ in specs]
    raw, failures, errors, elapsed = {}, {}, {}, {}
    total = [0.0] * size
    ok, scored, passed = [True] * size, [False] * size, {}  # passed: row -> functions that returned None
    for spec, out, mine in zip(specs, outcomes, rows):
        may_pass = not _is_builtin(spec.fn)
        counts = dict.fromkeys(FAILURE_KINDS, 0)
        mine_size = len(mine)
        scores, failed = out.per_sample(mine_size)
        if len(scores) != mine_size or len(failed) != mine_size:  # a runner's bug, never the function's
            scores, failed = [None] * mine_size, ["exception"] * mine_size
        if out.error is not None:
            errors[spec.name] = redact_text(out.error)  # a traceback or worker output may quote a key
        full: list[float | None] = [None] * size  # None outside ``mine``: not applicable
        for i, x, kind in zip(mine, scores, failed):
            if kind is None and x is not None and math.isfinite(x):
                full[i], scored[i] = x, True
                total[i] += spec.weight * x
                continue
            if kind is None and x is None and may_pass:  # decided below, once every function has answered
                passed.setdefault(i, []).append(spec.name)
                continue
            full[i] = None if kind is not None else x
            counts[kind or ("none" if x is None else "nonfinite")] += 1
            ok[i] = False
        raw[spec.name], failures[spec.name], elapsed[spec.name] = full, counts, out.elapsed_s
    declined: dict[str, list[bool]] = {}
    for i, names in passed.items():  # None where another function scored: it does not apply there
        for name in names:
            if scored[i]:
                declined.setdefault(name, [False] * size)[i] = True
            else:
                failures[name]["none"] += 1
                ok[i] = False
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
        declined=declined,
    )


def _is_builtin(fn) -> bool:
    """A built-in reward (its None is a failure to score, never "does not apply")."""
    from .loader import RECIPE_ATTR
    from .registry import BUILTIN_REWARDS

    recipe = getattr(getattr(fn, "fn", fn), RECIPE_ATTR, None)
    return recipe is not None and recipe[0] in BUILTIN_REWARDS


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
        self._planned = [PlannedReward.of(s.fn) for s in self.specs]  # how each is called, decided once
        self._runners = [make_runner(f, iso, chunk_size=s.chunk_size, limits=s.limits,
                                     env_passthrough=s.env_passthrough)
                         for f, s, iso in zip(self._planned, self.specs, self.isolations)]

    def score(self, prompts: Sequence, completions: Sequence, columns: dict | None = None, *,
              completion_ids: Sequence | None = None, chat_prompts: Sequence | None = None,
              chat_completions: Sequence | None = None) -> ScoreResult:
        """Call every reward function once on the batch (on the rows of its domains); never raises
        for a function's failure.

        ``completion_ids[i]``: the token ids of completion ``i`` (for functions that take them);
        ``chat_prompts[i]``: the message list sample ``i``'s prompt was made from, ``None`` for a
        text prompt (TRL-style functions receive it and the completion as a message list);
        ``chat_completions[i]``: a multi-turn episode's messages after the prompt, the completion a
        TRL-style function receives for a chat prompt (``None``: the one assistant message)."""
        columns = _check_batch(prompts, completions, columns, completion_ids, chat_prompts, chat_completions)
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
        calls, refused = {}, {}
        for i in order:  # each function gets its own copies of its own rows: none sees another's
            mine = rows[i]
            if not mine:
                calls[i] = _NotCalled()
                continue
            pick = (lambda seq: None if seq is None else [seq[j] for j in mine])
            batch = _batch_for(self._planned[i].plan, pick(prompts), pick(completions),
                               {k: pick(v) for k, v in columns.items()}, pick(completion_ids), pick(chat_prompts),
                               pick(chat_completions))
            why = call_error(self._planned[i], *batch)
            if why is not None:
                refused[i] = f"{describe_call(self._planned[i], *batch)}: {why}"
            calls[i] = self._runners[i].start(*batch)
        outcomes = [calls[i].wait(spec.timeout_s) for i, spec in enumerate(self.specs)]
        result = _assemble(self.specs, outcomes, size, rows, domains)
        if chat_prompts is not None and any(m is not None for m in chat_prompts):
            for i, spec in enumerate(self.specs):  # text where TRL passes messages: say so
                hint = chat_shape_hint(self._planned[i].plan, result.errors.get(spec.name) or "")
                if hint:
                    result.errors[spec.name] = f"{result.errors[spec.name].rstrip()}\n{hint}\n"
        result.metrics, result.metric_counts = self._reported_metrics(outcomes)
        # a binding error counts only if the call failed too (a decorator may accept what its
        # wrapped signature does not)
        result.call_errors = {self.specs[i].name: text for i, text in refused.items()
                              if outcomes[i].status == "exception"}
        return result

    def _reported_metrics(self, outcomes: list) -> tuple[dict[str, float], set[str]]:
        """``reward/<name>/<key>`` from each function's optional ``metrics()`` method: the trainer's
        own object, or under ``process`` isolation what the worker's copy (the one that scored)
        reported with the batch - checked, since the worker runs untrusted code. Also the keys
        reported as a :class:`~steadyrl.metrics.Count` (declared by the reporter: summed, not averaged)."""
        out: dict[str, float] = {}
        counts: set[str] = set()
        for spec, isolation, outcome in zip(self.specs, self.isolations, outcomes):
            if isolation == "process":
                values, counted = _worker_metrics(spec.name, outcome.metrics, outcome.metric_counts)
                out.update(values)
                counts.update(counted)
                continue
            report = getattr(spec.fn, "metrics", None)
            if not callable(report):
                continue
            try:
                values = {f"reward/{spec.name}/{k}": v for k, v in report().items()}
                out.update({k: float(v) for k, v in values.items()})
                counts.update(k for k, v in values.items() if isinstance(v, Count))
            except Exception:  # noqa: BLE001 - a metrics report never fails a step
                continue
        return out, counts

    def close(self) -> None:
        """Stop the worker processes (idle ones exit at once)."""
        for runner in self._runners:
            runner.close()

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


MAX_WORKER_METRICS = 64


def _worker_metrics(name: str, reported, counted=None) -> tuple[dict[str, float], set[str]]:
    """A worker's ``{key: number}`` report as ``reward/<name>/<key>``: at most 64 finite numbers
    under short keys of word characters and ``/``; anything else is dropped. ``counted``: the keys
    the worker said were counts (a list of strings; anything else ignored)."""
    if not isinstance(reported, dict):
        return {}, set()
    counted = set(k for k in counted if isinstance(k, str)) if isinstance(counted, list) else set()
    out, counts = {}, set()
    for key, value in list(reported.items())[:MAX_WORKER_METRICS]:
        if isinstance(key, str) and 0 < len(key) <= 64 and all(c.isalnum() or c in "_/" for c in key) \
                and _is_number(value) and math.isfinite(value):
            out[f"reward/{name}/{key}"] = float(value)
            if key in counted:
                counts.add(f"reward/{name}/{key}")
    return out, counts


def _batch_for(plan, prompts, completions, columns, completion_ids, chat_prompts,
               chat_completions=None) -> tuple[list, list, dict]:
    """``(prompts, completions, columns)`` as the function of ``plan`` receives them, copied."""
    cols = {k: list(v) for k, v in columns.items()}
    if completion_ids is not None and plan.takes_ids:  # first, in TRL's order
        cols = {"completion_ids": [list(ids) for ids in completion_ids], **cols}
    if plan.style == "positional" or chat_prompts is None:
        return list(prompts), list(completions), cols
    chat = [m is not None for m in chat_prompts]
    ps = [copy.deepcopy(m) if c else p for p, m, c in zip(prompts, chat_prompts, chat)]
    turns = chat_completions or [None] * len(completions)
    cs = [(copy.deepcopy(m) if m else [{"role": "assistant", "content": t}]) if c else t
          for t, c, m in zip(completions, chat, turns)]
    return ps, cs, cols


def score_batch(
    specs: Sequence[RewardSpec],
    prompts: Sequence,
    completions: Sequence,
    columns: dict | None = None,
    *,
    isolation: Isolation | None = None,
    completion_ids: Sequence | None = None,
    chat_prompts: Sequence | None = None,
    domain_key: str | None = None,
) -> ScoreResult:
    """Score one batch (a one-off :class:`RewardScorer`; a training loop keeps one instead, so
    that worker processes are forked once, not per batch)."""
    with RewardScorer(specs, isolation=isolation, domain_key=domain_key) as scorer:
        return scorer.score(prompts, completions, columns, completion_ids=completion_ids,
                            chat_prompts=chat_prompts)
