"""Reward metrics of one scored batch (names from ``docs/metrics.md``).

* ``reward/<name>/mean``: function ``name``'s mean over the samples it scored (finite values);
* ``reward/<name>/failed``: samples it failed on (exception, time-out, None, NaN / inf);
* ``reward/<name>/<key>``: what the function's own ``metrics()`` reported (``ScoreResult.metrics``:
  a model or server reward's ``time_s``, ``cache_hit_rate`` and ``failures/<reason>``);
* ``reward/mean``, ``reward/std``, ``reward/min``, ``reward/max``: the combined (weighted) reward
  over the valid samples; ``std`` is the population std (0 for one sample, never NaN);
* ``reward/valid_frac``: fraction of samples with a valid combined reward.

A mean / std / min / max over no sample at all is left out of the dict rather than reported as
NaN or as a made-up 0; ``failed`` and ``valid_frac`` are always there.
"""

from __future__ import annotations

import math

from .scoring import ScoreResult

__all__ = ["reward_metrics"]


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
    valid = result.valid.tolist()
    # The combined reward again, in float64 from the raw scores (``scores`` is float32).
    combined = [
        math.fsum(result.weights[n] * result.raw[n][i] for n in result.names) for i in range(size) if valid[i]
    ]
    if combined:
        mean = math.fsum(combined) / len(combined)
        metrics["reward/mean"] = mean
        metrics["reward/std"] = math.sqrt(math.fsum((x - mean) ** 2 for x in combined) / len(combined))
        metrics["reward/min"] = min(combined)
        metrics["reward/max"] = max(combined)
    metrics["reward/valid_frac"] = sum(valid) / size if size else 0.0
    return metrics
