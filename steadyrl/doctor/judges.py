"""The detector of a judge that does not answer: an ``llm_judge`` reward in ``mode: rubric`` scores a
criterion 0 when the judge's reply holds no verdict (``reward/<name>/criterion/not_a_verdict_frac``,
:mod:`steadyrl.rewards.rubric`). A judge that never answers makes that reward a constant 0: the run
trains on nothing from it while every metric looks calm (a run reported "healthy" with 100% of the
replies verdict-less). It needs one step only: a constant reward is wrong from the first."""

from __future__ import annotations

from .findings import Finding, register_detector
from .run import RunData, fmt, mean, span, values
from ..config.doctor_thresholds import Thresholds

SUFFIX = "/criterion/not_a_verdict_frac"


@register_detector("judge_silent")
def judge_silent(run: RunData, t: Thresholds) -> Finding | None:
    evidence, worst, steps = [], 0.0, []
    for key in run.keys("reward/", SUFFIX):
        series = run.series(key)
        if not series:
            continue
        share = mean(values(series))
        if not share > t.no_verdict_max:
            continue
        name = key[len("reward/"):-len(SUFFIX)]
        scores = values(run.series(f"reward/{name}/mean"))
        flat = scores and len(set(scores)) == 1
        constant = f"; `reward/{name}/mean` is {fmt(scores[0])} at every step" if flat else ""
        never = share >= 1.0
        evidence.append(f"`{key}` averages {fmt(share)} over {len(series)} step(s): the judge's replies held "
                        f"{'no verdict at all' if never else 'no verdict that often'} (each scored 0), above "
                        f"no_verdict_max {fmt(t.no_verdict_max)}{constant}")
        worst = max(worst, 10.0 if never else share / max(t.no_verdict_max, 1e-3))
        steps += [series[0][0], series[-1][0]]
    if not evidence:
        return None
    return Finding(
        "judge_silent", "A judge returned no verdict: its reward carries no signal", (min(steps), max(steps)),
        evidence,
        "Read the judge's replies: a model that does not follow the rubric template (it must end with PASS / "
        "FAIL or YES / NO), a reply cut by the judge's max_tokens, or a wrong `model` / chat template at the "
        "judge's server. Fix the judge or its `rubric_template` before training on this reward.",
        worst)
