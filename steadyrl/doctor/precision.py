"""The detector of a frozen policy: updates lost to precision (docs/precision.md).

``actor/params_changed_frac`` is the fraction of a fixed sample of the trained weights that one
training step changed (:class:`steadyrl.trainer.optim.UpdateProbe`). AdamW moves every weight
with a gradient by about ``lr`` a step, so in float32 it is near 1 (0.9 or more; weights without a
gradient, e.g. embedding rows of unseen tokens, stay); bfloat16 weights updated by plain AdamW at
a small lr keep their value (bf16's spacing at |w| = 0.02 is 1.2e-4, above lr 1e-6), and the
fraction falls to a few percent while loss and gradient norm look healthy. Steps without a
gradient (``actor/grad_norm`` 0: every advantage 0, nothing to apply) are not counted.
"""

from __future__ import annotations

from .findings import Finding, register_detector
from .run import RunData, fmt, median, span, values
from ..config.doctor_thresholds import Thresholds


@register_detector("lost_updates")
def lost_updates(run: RunData, t: Thresholds) -> Finding | None:
    moving = {step for step, norm in run.series("actor/grad_norm") if norm > 0}  # no gradient: nothing to lose
    series = [(step, v) for step, v in run.series("actor/params_changed_frac") if step in moving]
    if len(series) < 2:
        return None
    frac = median(values(series))
    if not frac < t.params_changed_min:
        return None
    ratio = run.series("actor/update_ratio")
    evidence = [f"`actor/params_changed_frac` median {fmt(frac)} over {len(series)} steps with a gradient: only that share "
                f"of the sampled weights changed per step (float32 training changes 0.9 or more), below "
                f"params_changed_min {fmt(t.params_changed_min)}"]
    if ratio:
        evidence.append(f"`actor/update_ratio` (||dtheta|| / ||theta||) median {fmt(median(values(ratio)))}")
    return Finding(
        "lost_updates", "Updates lost to precision (a frozen policy)", span(series), evidence,
        f"The optimizer's steps are rounded away: with `model.dtype`{run.setting('model.dtype')} bfloat16 "
        f"and `model.bf16_update`{run.setting('model.bf16_update')} plain, an update below half the weight's "
        f"spacing (6.1e-5 at |w| = 0.02) is lost at `optim.lr`{run.setting('optim.lr')}. Set "
        "`model.dtype=auto` (float32 weights, bfloat16 compute on a GPU) or `model.bf16_update=kahan`.",
        t.params_changed_min / max(frac, 1e-3))
