"""Detectors of the learning signal: groups without reward variance, truncation, length hacking,
reward rising while held-out accuracy falls, and one reward component or domain dominating."""

from __future__ import annotations

import math

from .findings import Finding, register_detector
from .run import RunData, aligned, correlation, finite_number, fmt, mean, span, values, windows
from ..config.doctor_thresholds import Thresholds


def _late(series, t: Thresholds) -> float:
    return mean(values(windows(series, t.window_frac)[1]))


def reward_position(run: RunData, t: Thresholds) -> float:
    """Where the late mean reward/mean sits between the late means of reward/min and reward/max:
    0 at the bottom, 1 at the top. When those are equal (every late reward the same: all solved, or all
    failed), between the lowest reward/min and the highest reward/max of the whole run instead (a run
    scoring every late prompt 1 after starting at 0 sits at the top: solved, not collapsed); NaN when the
    run does not log them or its rewards never differed."""
    reward, top, bottom = (_late(run.series(k), t) if run.series(k) else math.nan
                           for k in ("reward/mean", "reward/max", "reward/min"))
    if not (math.isfinite(reward) and math.isfinite(top) and math.isfinite(bottom)):
        return math.nan
    if not top > bottom:
        top, bottom = max(values(run.series("reward/max"))), min(values(run.series("reward/min")))
        if not top > bottom:
            return math.nan
    return (reward - bottom) / (top - bottom)


def distill_position(run: RunData, t: Thresholds) -> float:
    """The share of the student's starting gap to the teacher it has closed: ``1 - late / early``
    of ``distill/reverse_kl`` (1: it matches the teacher); NaN when not logged or the early mean is <= 0."""
    series = run.series("distill/reverse_kl")
    if len(series) < 2:
        return math.nan
    early, late = (mean(values(w)) for w in windows(series, t.window_frac))
    return 1.0 - late / early if early > 0 else math.nan


def training_reward(run: RunData) -> list[tuple[float, float]]:
    """The series of the reward that trains: ``-distill/reverse_kl`` in pure distillation (the task's
    rewards are scored and logged but enter the advantage as 0), else ``reward/mean``."""
    if run.distillation == "pure":
        return [(s, -v) for s, v in run.series("distill/reverse_kl")]
    return run.series("reward/mean")


def solved(run: RunData, t: Thresholds) -> bool:
    """The run has learned what it trains on (``solved_frac``): convergence, not a problem. The task's
    prompts (:func:`reward_position`); with a teacher also (pure distillation: only) the teacher's
    signal, the student having closed ``solved_frac`` of its gap (:func:`distill_position`)."""
    if run.distillation is None:
        return reward_position(run, t) >= t.solved_frac
    distilled = distill_position(run, t) >= t.solved_frac
    return distilled if run.distillation == "pure" else distilled and reward_position(run, t) >= t.solved_frac


def _task_reward_trains(run: RunData) -> bool:
    """False in pure distillation: a finding that reads the task's rewards would read a signal that
    does not enter the advantage."""
    return run.distillation != "pure"


@register_detector("zero_variance")
def zero_variance(run: RunData, t: Thresholds) -> Finding | None:
    series = run.series("batch/zero_std_group_frac")
    if len(series) < max(t.min_steps, 2) or run.distillation is not None:  # equal task scores: the teacher's
        return None  # per-token signal still trains (and pure distillation's scores enter as 0)
    late = windows(series, t.window_frac)[1]
    share = mean(values(late))
    if share <= t.zero_var_max or solved(run, t):  # all-solved groups at the end of a solved run: done
        return None
    reward, top, bottom = (_late(run.series(k), t) if run.series(k) else math.nan
                           for k in ("reward/mean", "reward/max", "reward/min"))
    if math.isfinite(reward) and math.isfinite(top) and math.isfinite(bottom) and top > bottom:
        where = "solved" if reward - bottom > top - reward else "failed"
        kind = f" (reward/mean {fmt(reward)} in [{fmt(bottom)}, {fmt(top)}]: mostly all-{where} groups)"
    elif math.isfinite(top) and math.isfinite(bottom) and top == bottom:
        kind = f" (every late reward is {fmt(top)})"
    else:
        kind = ""
    return Finding(
        "zero_variance", "Most groups carry no signal", span(late),
        [f"`batch/zero_std_group_frac` averages {fmt(share)} over steps {fmt(late[0][0])}-{fmt(late[-1][0])}, "
         f"above zero_var_max {fmt(t.zero_var_max)}{kind}"],
        "A group whose rewards are all equal has zero advantage: turn on `algorithm.dynamic_sampling` "
        f"(refills the batch with groups that carry signal), raise `rollout.group_size`"
        f"{run.setting('rollout.group_size')}, or drop prompts that are always solved or always failed.",
        share / t.zero_var_max if t.zero_var_max else 10.0)


@register_detector("truncation")
def truncation(run: RunData, t: Thresholds) -> Finding | None:
    """Truncation high (late mean above ``truncation_max``) or rising (late - early above
    ``truncation_rise``). A rate falling by more than ``truncation_rise`` is the policy learning to
    end within the limit: still a finding while it stays above ``truncation_max``, titled and advised
    as falling, at the lowest severity (raising the limit is not the change to make)."""
    series = run.series("response/truncated_frac")
    if len(series) < max(t.min_steps, 2):
        return None
    early, late = windows(series, t.window_frac)
    e, l = mean(values(early)), mean(values(late))
    if not (l > t.truncation_max or l - e > t.truncation_rise):
        return None
    evidence = [f"`response/truncated_frac` {fmt(e)} (steps {fmt(early[0][0])}-{fmt(early[-1][0])}) -> {fmt(l)} "
                f"(steps {fmt(late[0][0])}-{fmt(late[-1][0])}); truncation_max {fmt(t.truncation_max)}, "
                f"truncation_rise {fmt(t.truncation_rise)}"]
    limit = run.setting("rollout.max_new_tokens")
    if e - l > t.truncation_rise:
        return Finding(
            "truncation", "Truncation rate high but falling", span(series), evidence,
            "The policy is learning to end within the length limit: let it train on. If the rate levels off "
            f"above truncation_max, raise `rollout.max_new_tokens`{limit} or leave cut responses out of the "
            "loss with `algorithm.mask_truncated`.", 1.0, examples=span(late))
    rising = l - e > t.truncation_rise
    return Finding(
        "truncation", "Truncation rate rising" if rising else "Truncation rate high", span(series), evidence,
        f"Responses run into the length limit: raise `rollout.max_new_tokens`{limit} "
        "if answers need the room, or leave cut responses out of the loss with `algorithm.mask_truncated`; "
        "read the longest samples for repetition loops.",
        max(l / t.truncation_max if t.truncation_max else 1.0, (l - e) / t.truncation_rise if t.truncation_rise else 1.0),
        examples=span(late))


@register_detector("length_hacking")
def length_hacking(run: RunData, t: Thresholds) -> Finding | None:
    length, reward = run.series("response/length_mean"), run.series("reward/mean")
    if not _task_reward_trains(run):
        return None
    if len(length) < max(t.min_steps, 3) or len(reward) < max(t.min_steps, 3):
        return None
    early, late = windows(length, t.window_frac)
    e, l = mean(values(early)), mean(values(late))
    r_early, r_late = (mean(values(w)) for w in windows(reward, t.window_frac))
    corr = correlation(*aligned(length, reward))
    if not (e > 0 and l > t.length_growth * e and corr > t.length_reward_corr and r_late > r_early):
        return None
    evidence = [f"`response/length_mean` {fmt(e)} -> {fmt(l)} ({fmt(l / e)}x, length_growth {fmt(t.length_growth)}) "
                f"while `reward/mean` {fmt(r_early)} -> {fmt(r_late)}; their correlation over steps {fmt(corr)} "
                f"(length_reward_corr {fmt(t.length_reward_corr)})"]
    pairs = [(len(str(s.get("completion", ""))), finite_number(s.get("reward"))) for s in run.samples]
    pairs = [p for p in pairs if p[1] is not None]
    if len(pairs) >= 10:
        evidence.append(f"over {len(pairs)} logged samples, completion length vs reward: correlation "
                        f"{fmt(correlation([p[0] for p in pairs], [p[1] for p in pairs]))}")
    return Finding(
        "length_hacking", "Response length rising with reward (length hacking?)", span(length), evidence,
        "Check that the reward pays for correctness, not length: read the longest samples below. If length "
        "earns reward, cap or penalise it in the reward, or lower that component's `rewards[].weight`.",
        (l / e) / t.length_growth, examples=span(late))


@register_detector("reward_vs_heldout")
def reward_vs_heldout(run: RunData, t: Thresholds) -> Finding | None:
    reward = run.series("reward/mean")
    key = "eval/accuracy" if run.series("eval/accuracy", train_only=False) else "eval/reward_mean"
    evals = run.series(key, train_only=False)
    if not _task_reward_trains(run):
        return None
    if len(reward) < max(t.min_steps, 2) or len(evals) < 2:
        return None
    r_early, r_late = (mean(values(w)) for w in windows(reward, t.window_frac))
    # The last k evaluations against the best k in a row before them (k: window_frac of the evaluations, so 1
    # for a few). Evaluated every step, the best of 40 noisy single evaluations is above the last one by
    # chance alone: a held-out accuracy rising 0.3 -> 0.7 on 64 prompts read as falling in 26 of 40 seeds.
    k = max(1, int(round(len(evals) * t.window_frac)))
    means = [(evals[i][0], evals[i + k - 1][0], mean(values(evals[i:i + k]))) for i in range(len(evals) - k + 1)]
    (best_from, best_step, best), (last_from, last_step, last) = max(means[:-1], key=lambda m: m[2]), means[-1]
    if not (r_late - r_early > t.reward_rise and best - last > t.heldout_drop):
        return None
    where = (lambda a, b, x: f"{fmt(x)} at step {fmt(b)}") if k == 1 else \
        (lambda a, b, x: f"mean {fmt(x)} over steps {fmt(a)}-{fmt(b)}")
    return Finding(
        "reward_vs_heldout", "Reward rising while held-out accuracy falls", (best_step, last_step),
        [f"`reward/mean` {fmt(r_early)} -> {fmt(r_late)} (reward_rise {fmt(t.reward_rise)})",
         f"`{key}` {where(best_from, best_step, best)} -> {where(last_from, last_step, last)} "
         f"(heldout_drop {fmt(t.heldout_drop)}{f'; {k} evaluations a window' if k > 1 else ''})"],
        "The policy fits the training reward, not the task: read the best-rewarded samples for reward "
        f"hacking, raise `algorithm.kl_coef`{run.setting('algorithm.kl_coef')}, and keep the checkpoint of the "
        "best held-out step.",
        (best - last) / t.heldout_drop if t.heldout_drop else 10.0)


def _weights(run: RunData) -> dict[str, float]:
    """Reward key -> weight from the run's config, under the name the reward is logged by (its label, else
    the short name: 'path/file.py:fmt' is reward/fmt), 1 where it cannot be told."""
    from ..reward_specs import reward_name

    out = {}
    specs = run.config.get("rewards") if isinstance(run.config, dict) else None
    for spec in specs if isinstance(specs, list) else []:  # a hand-edited config.yaml: anything
        weight = finite_number(spec.get("weight")) if isinstance(spec, dict) else None
        if weight is not None:
            label, name = spec.get("label"), spec.get("name")
            key = label if isinstance(label, str) else reward_name(name) if isinstance(name, str) else None
            if key is not None:
                out[key] = weight
    return out


def _spread(xs: list[float]) -> float:
    m = mean(xs)
    return math.sqrt(mean([(x - m) ** 2 for x in xs])) if xs else 0.0


def _component_shares(run: RunData, t: Thresholds) -> tuple[dict[str, float], str]:
    """Each reward component's share of the weighted spread: over the late half of the logged
    samples when there are some, else over the late window of its step means."""
    names = [k[len("reward/"):-len("/mean")] for k in run.keys("reward/", "/mean") if k.count("/") == 2]
    weights = _weights(run)
    late_steps = {s for s, _ in windows(run.series("reward/mean"), 0.5)[1]}
    rows = [s for s in run.samples if s.get("step") in late_steps] or run.samples[len(run.samples) // 2:]
    per_sample = {n: [x for r in rows if (x := finite_number(r.get(f"reward/{n}"))) is not None] for n in names}
    basis = "samples" if all(len(xs) >= 4 for xs in per_sample.values()) else "step means"
    spreads = {}
    for name in names:  # one basis for all: spreads over samples and over step means do not compare
        xs = per_sample[name] if basis == "samples" else values(windows(run.series(f"reward/{name}/mean"), 0.5)[1])
        spreads[name] = abs(weights.get(name, 1.0)) * _spread(xs)
    total = sum(spreads.values())
    return ({k: v / total for k, v in spreads.items()} if total > 0 else {}), basis


@register_detector("dominance")
def dominance(run: RunData, t: Thresholds) -> Finding | None:
    if len(run.series("reward/mean")) < max(t.min_steps, 2) or not _task_reward_trains(run):
        return None
    evidence, worst = [], 0.0
    shares, basis = _component_shares(run, t)
    if len(shares) >= 2:
        name, share = max(shares.items(), key=lambda kv: kv[1])
        if share > t.dominance_share:
            worst = max(worst, share)
            evidence.append(f"reward `{name}` carries {fmt(share)} of the weighted reward spread over the late "
                            f"{basis} (" + ", ".join(f"{k} {fmt(v)}" for k, v in sorted(shares.items())) + ")")
    domains = {k[len("reward/domain/"):-len("/count")]: mean(values(run.series(k)))  # a domain may hold '/'
               for k in run.keys("reward/domain/", "/count")}
    total = sum(domains.values())
    if len(domains) >= 2 and total > 0:
        name, count = max(domains.items(), key=lambda kv: kv[1])
        if count / total > t.dominance_share:
            worst = max(worst, count / total)
            evidence.append(f"domain `{name}` is {fmt(count / total)} of the samples (mean counts: " +
                            ", ".join(f"{k} {fmt(v)}" for k, v in sorted(domains.items())) + ")")
    if not evidence:
        return None
    return Finding(
        "dominance", "One reward component or domain dominates", span(run.series("reward/mean")),
        evidence + [f"dominance_share {fmt(t.dominance_share)}"],
        "The other components barely steer the advantages: raise their `rewards[].weight`, check that the "
        "dominant one is not constant elsewhere, or balance domains (`data.train_sources` weights, "
        "`algorithm.reward_norm_by_domain`).",
        worst / t.dominance_share if t.dominance_share else 10.0)
