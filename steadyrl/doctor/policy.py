"""Detectors of the policy update: entropy, clip fraction, training-inference mismatch, gradient
spikes, skipped steps and staleness. Each reads the metrics of docs/metrics.md by name."""

from __future__ import annotations

from .findings import Finding, register_detector
from .learning import distill_position, solved
from .run import RunData, fmt, mean, median, span, values, windows
from ..config.doctor_thresholds import Thresholds


def _early_late(run: RunData, key: str, t: Thresholds):
    """``(series, early mean, late mean, early window, late window)``, or None when the metric has
    fewer than ``t.min_steps`` points."""
    series = run.series(key)
    if len(series) < max(t.min_steps, 2):
        return None
    early, late = windows(series, t.window_frac)
    return series, mean(values(early)), mean(values(late)), early, late


def _from_to(key: str, early, late, e: float, l: float) -> str:
    return (f"`{key}` {fmt(e)} (mean of steps {fmt(early[0][0])}-{fmt(early[-1][0])}) -> {fmt(l)} "
            f"(steps {fmt(late[0][0])}-{fmt(late[-1][0])})")


@register_detector("entropy_collapse")
def entropy_collapse(run: RunData, t: Thresholds) -> Finding | None:
    got = _early_late(run, "actor/entropy", t)
    if got is None:
        return None
    series, e, l, early, late = got
    if not (e > 0 and l < t.entropy_collapse_ratio * e) or solved(run, t):  # a solved task: converged
        return None
    return Finding(
        "entropy_collapse", "Entropy collapsed", span(series),
        [_from_to("actor/entropy", early, late, e, l) + f": {fmt(l / e)} of the start, below "
         f"entropy_collapse_ratio {fmt(t.entropy_collapse_ratio)}"],
        f"The policy stopped exploring. Lower `optim.lr`{run.setting('optim.lr')}, raise the upper clip "
        f"`algorithm.pg_clip_high` (clip-higher, e.g. 0.28), or add a small `algorithm.entropy_coef` (1e-3).",
        t.entropy_collapse_ratio * e / max(l, 1e-12), examples=span(late))


@register_detector("entropy_explosion")
def entropy_explosion(run: RunData, t: Thresholds) -> Finding | None:
    got = _early_late(run, "actor/entropy", t)
    if got is None:
        return None
    series, e, l, early, late = got
    if not (e > 0 and l > t.entropy_explosion_ratio * e):
        return None
    if run.distillation is not None and distill_position(run, t) >= t.solved_frac:
        return None  # the student closed its gap to the teacher: its entropy is the teacher's, not noise
    return Finding(
        "entropy_explosion", "Entropy exploded", span(series),
        [_from_to("actor/entropy", early, late, e, l) + f": {fmt(l / e)}x the start, above "
         f"entropy_explosion_ratio {fmt(t.entropy_explosion_ratio)}"],
        f"The policy is drifting towards noise. Lower `optim.lr`{run.setting('optim.lr')}, drop "
        f"`algorithm.entropy_coef`{run.setting('algorithm.entropy_coef')} to 0, and check the mismatch "
        "metrics (an engine whose log-probs disagree with the trainer's can blow entropy up).",
        l / (t.entropy_explosion_ratio * e), examples=span(late))


@register_detector("clip_drift")
def clip_drift(run: RunData, t: Thresholds) -> Finding | None:
    got = _early_late(run, "actor/pg_clipfrac", t)
    if got is None:
        return None
    series, e, l, early, late = got
    if not (l > t.clip_frac_max or l - e > t.clip_frac_rise):
        return None
    return Finding(
        "clip_drift", "Clip fraction drifting up", span(series),
        [_from_to("actor/pg_clipfrac", early, late, e, l) + f" (clip_frac_max {fmt(t.clip_frac_max)}, "
         f"clip_frac_rise {fmt(t.clip_frac_rise)})"],
        f"Each update moves the policy too far from the one that sampled: lower `optim.lr`"
        f"{run.setting('optim.lr')}, use fewer `trainer.ppo_epochs`{run.setting('trainer.ppo_epochs')} "
        "or a larger `trainer.mini_batch_size`.",
        max(l / t.clip_frac_max if t.clip_frac_max else 1.0, (l - e) / t.clip_frac_rise if t.clip_frac_rise else 1.0),
        examples=span(late))


@register_detector("mismatch")
def mismatch(run: RunData, t: Thresholds) -> Finding | None:
    got = _early_late(run, "rollout/logprob_diff_mean", t)
    if got is None:
        return None
    series, e, l, early, late = got
    e, l = abs(e), abs(l)
    grown = l > t.mismatch_floor and l > t.mismatch_growth * max(e, 1e-12)
    if not (l > t.mismatch_max or grown):
        return None
    evidence = [_from_to("|rollout/logprob_diff_mean|", early, late, e, l) +
                f" (mismatch_max {fmt(t.mismatch_max)}, mismatch_growth {fmt(t.mismatch_growth)})"]
    for key in ("mismatch/k3", "mismatch/masked_token_frac", "mismatch/masked_seq_frac", "rollout/tis_clip_frac"):
        got_key = _early_late(run, key, t)  # the KL and what the correction cut, where the run logs them
        if got_key is not None:
            evidence.append(_from_to(key, got_key[3], got_key[4], got_key[1], got_key[2]))
    return Finding(
        "mismatch", "Training-inference mismatch growing", span(series), evidence,
        "The engine's log-probs drift away from the trainer's. Find out why with `steadyrl doctor "
        "CONFIG` (it ranks the causes: precision, sampling parameters, attention, stale weights); "
        "sample and train in the same precision; and correct what is left with "
        f"`rollout.correction.mode`{run.setting('rollout.correction.mode')} (mask or truncate; "
        f"`rollout.tis_cap`{run.setting('rollout.tis_cap')} is token truncation), see docs/stability.md.",
        max(l / t.mismatch_max if t.mismatch_max else 1.0,
            l / (t.mismatch_growth * max(e, 1e-12)) if grown else 1.0), examples=span(late))


@register_detector("grad_spikes")
def grad_spikes(run: RunData, t: Thresholds) -> Finding | None:
    series = run.series("actor/grad_norm")
    window = max(int(t.grad_spike_window), 3)
    spikes = []
    for i in range(3, len(series)):
        before = median(values(series[max(0, i - window):i]))
        step, value = series[i]
        if before > 0 and value > t.grad_spike_factor * before and value > t.grad_spike_min:
            spikes.append((step, value, before))
    if not spikes:
        return None
    worst = max(spikes, key=lambda s: s[1] / s[2])
    listed = ", ".join(f"step {fmt(s)}: {fmt(v)} vs median {fmt(b)}" for s, v, b in spikes[:5])
    return Finding(
        "grad_spikes", f"Gradient-norm spikes ({len(spikes)})", (spikes[0][0], spikes[-1][0]),
        [f"`actor/grad_norm` above grad_spike_factor {fmt(t.grad_spike_factor)} x the median of the "
         f"{window} steps before (and above grad_spike_min {fmt(t.grad_spike_min)}): {listed}"
         + (" ..." if len(spikes) > 5 else "")],
        f"Lower `optim.lr`{run.setting('optim.lr')}, keep `optim.max_grad_norm`"
        f"{run.setting('optim.max_grad_norm')} at 1.0 or below, and read the spike steps' samples "
        "(a degenerate completion or an extreme advantage).",
        worst[1] / (t.grad_spike_factor * worst[2]))


@register_detector("skipped_steps")
def skipped_steps(run: RunData, t: Thresholds) -> Finding | None:
    series = run.series("health/skipped_steps")
    steps, last = [], 0.0
    for step, count in series:
        if count > last:
            steps.append(step)
        last = max(last, count)
    empty = [s for s, v in run.series("batch/no_valid_sample") if v > 0]
    total = last + len(empty)
    if total <= t.skipped_steps_max:
        return None
    evidence = []
    if steps:
        evidence.append(f"`health/skipped_steps` reached {fmt(last)} (non-finite loss or gradient), rising at "
                        f"steps {', '.join(fmt(s) for s in steps[:10])}")
    if empty:
        evidence.append(f"`batch/no_valid_sample` at steps {', '.join(fmt(s) for s in empty[:10])}: "
                        "no sample could enter the loss")
    both = sorted(steps + empty)
    return Finding(
        "skipped_steps", "Steps skipped or empty", (both[0], both[-1]), evidence,
        f"A non-finite loss or gradient skips the step: lower `optim.lr`{run.setting('optim.lr')}, look for "
        "failing rewards (`reward/<name>/failed`) and for a growing `rollout/logprob_diff_mean`; steps "
        "with no valid sample usually mean every reward failed.",
        10.0 * total / max(t.skipped_steps_max, 1.0))


@register_detector("staleness")
def staleness(run: RunData, t: Thresholds) -> Finding | None:
    series = run.series("rollout/staleness_mean")
    if not series:
        return None
    stale = mean(values(series))
    clip = run.series("rollout/tis_clip_frac")
    late_clip = mean(values(windows(clip, t.window_frac)[1])) if clip else 0.0
    if not (stale > t.staleness_max or (stale > 0 and late_clip > t.tis_clip_max)):
        return None
    return Finding(
        "staleness", "Stale batches", span(series),
        [f"`rollout/staleness_mean` averages {fmt(stale)} policy versions (staleness_max {fmt(t.staleness_max)})",
         f"`rollout/tis_clip_frac` late mean {fmt(late_clip)} (tis_clip_max {fmt(t.tis_clip_max)})"],
        "Batches come from policies too many steps old: lower `rollout.asynchronous.max_staleness`"
        f"{run.setting('rollout.asynchronous.max_staleness')} and keep `rollout.tis_cap` on.",
        max(stale / t.staleness_max if t.staleness_max else 1.0, late_clip / t.tis_clip_max if t.tis_clip_max else 1.0))
