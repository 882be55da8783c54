"""The detector of failed episodes: a multi-turn run (an environment, tools, a ``rollout.multi_turn.agent``)
that keeps losing episodes to an agent or environment that raises, times out or returns no
number. Those episodes are left out of the update, so the run goes on - and looked healthy with
19-44% of its episodes failed per step (issue 33)."""

from __future__ import annotations

from .findings import Finding, register_detector
from .run import RunData, fmt, mean, span, values
from ..config.doctor_thresholds import Thresholds


def failed_fraction(run: RunData) -> list[tuple[float, float]]:
    """Per step, the fraction of its episodes that failed: ``rollout/failed_episode_frac``, or (a
    run logged before it existed) ``rollout/failed_episodes`` over prompts_per_step x group_size."""
    series = run.series("rollout/failed_episode_frac")
    if series:
        return series
    rollout = run.config.get("rollout") if isinstance(run.config, dict) else None
    try:
        episodes = float(rollout["prompts_per_step"]) * float(rollout["group_size"])
    except (TypeError, KeyError, ValueError):
        return []
    return [(s, v / episodes) for s, v in run.series("rollout/failed_episodes")] if episodes > 0 else []


@register_detector("failed_episodes")
def failed_episodes(run: RunData, t: Thresholds) -> Finding | None:
    series = failed_fraction(run)
    if not series:
        return None
    share = mean(values(series))
    if not share > t.failed_episodes_max:
        return None
    worst = max(series, key=lambda sv: sv[1])
    hit = [s for s, v in series if v > 0]
    return Finding(
        "failed_episodes", "Episodes failing", span(series),
        [f"{fmt(100 * share)}% of the episodes failed on average over steps {fmt(series[0][0])}-{fmt(series[-1][0])} "
         f"(most: {fmt(100 * worst[1])}% at step {fmt(worst[0])}; {len(hit)} of {len(series)} steps lost some), "
         f"above failed_episodes_max {fmt(100 * t.failed_episodes_max)}%"],
        "A failed episode (the agent or environment raised, timed out, or returned no number) is left out "
        "of the update: read the traceback the run printed once (`the agent (rollout.multi_turn.agent) failed on some "
        "episodes` / `the environment ...`), check `rollout/agent/errors` and `rollout/agent/timeouts`, and raise "
        f"`rollout.multi_turn.agent_timeout_s`{run.setting('rollout.multi_turn.agent_timeout_s')} if they time out.",
        share / t.failed_episodes_max if t.failed_episodes_max else 10.0 * share / 0.01)
