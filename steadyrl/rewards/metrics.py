"""Reward metrics of one scored batch (names from ``docs/metrics.md``).

* ``reward/<name>/mean``: function ``name``'s mean over the samples it scored (finite values);
* ``reward/<name>/failed``: samples it failed on (exception, time-out, None, NaN / inf); rows
  outside its domains are not applicable, never failures;
* ``reward/<name>/<key>``: what the function's own ``metrics()`` reported (``ScoreResult.metrics``:
  a model or server reward's ``time_s``, ``cache_hit_rate`` and ``failures/<reason>``);
* ``reward/mean``, ``reward/std``, ``reward/min``, ``reward/max``: the combined (weighted) reward
  over the valid samples; ``std`` is the population std (0 for one sample, never NaN);
* ``reward/valid_frac``: fraction of samples with a valid combined reward.

With reward domains (``data.domain_key``), for each domain ``d`` in the batch:

* ``reward/domain/<d>/mean``: the combined reward over the valid samples of ``d``;
* ``reward/domain/<d>/valid_frac``, ``reward/domain/<d>/count``: valid fraction, samples;
* ``reward/unrouted``: samples whose domain no reward applies to (invalid, never trained on).

A mean / std / min / max over no sample at all is left out of the dict rather than reported as
NaN or as a made-up 0; ``failed`` and ``valid_frac`` are always there.
"""

from __future__ import annotations

import math

from .scoring import ScoreResult

__all__ = ["reward_metrics", "domain_name"]


def domain_name(value) -> str:
    """How a row's domain appears in metric names (``null`` for a row without one)."""
    return "null" if value is None else str(value)


def _combined(result: ScoreResult) -> list[float | None]:
    """Each row's combined reward in float64 from the raw scores (None where invalid)."""
    applies = {name: result.applies(name) for name in result.names}
    valid = result.valid.tolist()
    # a valid row may hold None for a reward that gave nothing there (a rollout.multi_turn.agent that returned None)
    return [math.fsum(result.weights[n] * result.raw[n][i] for n in result.names
                      if applies[n][i] and result.raw[n][i] is not None)
            if valid[i] else None for i in range(result.batch_size)]


def _domain_metrics(result: ScoreResult, combined: list[float | None]) -> dict[str, float]:
    metrics: dict[str, float] = {}
    by_domain: dict[str, list[float | None]] = {}
    for d, value in zip(result.domains, combined):
        by_domain.setdefault(domain_name(d), []).append(value)
    for d, values in sorted(by_domain.items()):
        scored = [x for x in values if x is not None]
        if scored:
            metrics[f"reward/domain/{d}/mean"] = math.fsum(scored) / len(scored)
        metrics[f"reward/domain/{d}/valid_frac"] = len(scored) / len(values)
        metrics[f"reward/domain/{d}/count"] = float(len(values))
    metrics["reward/unrouted"] = float(sum(result.unrouted()))
    return metrics


def reward_metrics(result: ScoreResult) -> dict[str, float]:
    """The ``reward/...`` metrics of ``result``."""
    metrics: dict[str, float] = {}
    for name in result.names:
        values = [x for x in result.raw[name] if x is not None and math.isfinite(x)]
        if values:
            metrics[f"reward/{name}/mean"] = math.fsum(values) / len(values)
        metrics[f"reward/{name}/failed"] = float(result.failed(name))
    metrics.update(result.metrics)
    size = result.batch_size
    combined = _combined(result)
    scored = [x for x in combined if x is not None]
    if scored:
        mean = math.fsum(scored) / len(scored)
        metrics["reward/mean"] = mean
        metrics["reward/std"] = math.sqrt(math.fsum((x - mean) ** 2 for x in scored) / len(scored))
        metrics["reward/min"] = min(scored)
        metrics["reward/max"] = max(scored)
    metrics["reward/valid_frac"] = len(scored) / size if size else 0.0
    if result.domains is not None:
        metrics.update(_domain_metrics(result, combined))
    return metrics
