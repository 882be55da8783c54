"""The detector of a frozen policy: updates lost to precision (docs/precision.md), judged for the
run's own precision setting (``model.dtype`` / ``model.bf16_update`` of its config.yaml).

Each setting is judged by the motion of the value the optimizer trains (the float32 weight, the
bfloat16 weight plus its Kahan compensation, the master copy; :class:`steadyrl.trainer.optim.UpdateProbe`):

* float32 weights (``auto``, ``float32``), ``kahan``, ``master`` and ``plain``: that value moves
  at every step where a weight has a gradient, so ``actor/params_changed_frac`` (the share of a
  fixed sample of the trained weights one step changed) is near 1 (0.9 or more); below
  ``params_changed_min``, updates are lost. ``plain`` AdamW on bfloat16 loses the update of a
  weight when ``lr`` < half its spacing, i.e. of every weight above ``|w| = lr * 2**9``
  (float16: ``lr * 2**12``): at lr 1e-6 nearly all, at lr 1e-4 the larger weights only.
* ``stochastic_rounding`` (bfloat16; float16 weights are rounded to nearest, judged as ``plain``):
  the stored weight moves to a neighbour with probability ``|step| / spacing``, right on average,
  so few weights change per step by design and the changed share is no evidence. Its motion per
  weight, ``actor/update_rms = ||dtheta|| / sqrt(n)``, is (AdamW moves a weight by about lr a
  step): frozen when its median < ``update_rms_min * lr``. A run that does not log it is not judged.

Steps without a gradient (``actor/grad_norm`` 0: every advantage 0, nothing to apply) are not counted,
nor steps at learning rate 0 (``actor/lr``: a schedule's end). Stochastic rounding's motion is compared
with each step's own ``actor/lr`` where logged (a warm-up's lr is a fraction of ``optim.lr``). A run whose
every step with a gradient ran at lr 0 is named for that ("Learning rate 0"), never for its precision.
"""

from __future__ import annotations

from .findings import Finding, register_detector
from .run import RunData, finite_number, fmt, median, span, values
from ..config.doctor_thresholds import Thresholds

LOST_ABOVE = {"bfloat16": 2.0**9, "float16": 2.0**12}
"""Plain AdamW at ``lr`` loses the update of every weight above ``|w| = lr * LOST_ABOVE[dtype]``
(half the spacing of ``|w|`` exceeds lr: bfloat16 keeps 8 significant bits, float16 11)."""


def _config(run: RunData, *path: str):
    node = run.config
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _settings(run: RunData) -> tuple[str, str, float | None]:
    """``(stored dtype, update, lr)`` of the run's config ("float32"/"adamw" for auto and float32;
    ``model.bf16_update`` defaults to kahan, as the schema does)."""
    dtype = _config(run, "model", "dtype")
    dtype = dtype if dtype in ("bfloat16", "float16") else "float32"
    update = _config(run, "model", "bf16_update") if dtype != "float32" else "adamw"
    lr = _config(run, "optim", "lr")
    lr = finite_number(lr)
    lr = lr if lr is not None and lr > 0 else None
    return dtype, update if isinstance(update, str) else "kahan", lr


def _with_gradient(run: RunData) -> set[float]:
    return {step for step, norm in run.series("actor/grad_norm") if norm > 0}  # no gradient: nothing to lose


def _moving(run: RunData, key: str) -> list[tuple[float, float]]:
    """``key`` at the steps that applied an update: a gradient, and a learning rate above 0 where the run
    logs ``actor/lr`` (a step at lr 0, a schedule's end, asks for no motion: no evidence of a lost one)."""
    moving = _with_gradient(run) - {step for step, lr in run.series("actor/lr") if lr <= 0}
    return [(step, v) for step, v in run.series(key) if step in moving]


def _lr_zero(run: RunData, t: Thresholds) -> Finding | None:
    """Every step with a gradient ran at ``actor/lr`` 0: the policy cannot move, whatever the precision."""
    grad = _with_gradient(run)
    lrs = [(step, lr) for step, lr in run.series("actor/lr") if step in grad]
    if len(lrs) < 2 or any(lr > 0 for _, lr in lrs):
        return None
    return Finding(
        "lost_updates", "Learning rate 0 (a frozen policy)", span(lrs),
        [f"`actor/lr` is 0 at each of the {len(lrs)} steps with a gradient: no update was applied"],
        f"Nothing is lost to precision: the learning rate is 0. Check `optim.lr`{run.setting('optim.lr')} and its "
        f"schedule (`optim.warmup_steps`{run.setting('optim.warmup_steps')}, `optim.schedule`"
        f"{run.setting('optim.schedule')}, `optim.min_lr_ratio`{run.setting('optim.min_lr_ratio')}).",
        10.0)


def _ratio_line(run: RunData) -> list[str]:
    ratio = run.series("actor/update_ratio")
    return [f"`actor/update_ratio` (||dtheta|| / ||theta||) median {fmt(median(values(ratio)))}"] if ratio else []


def _stochastic(run: RunData, t: Thresholds, lr: float | None) -> Finding | None:
    """``actor/update_rms`` against the step's own ``actor/lr`` where logged (during a warm-up the step's lr
    is a fraction of ``optim.lr``, and AdamW moves a weight by about that), else against ``optim.lr``."""
    series = _moving(run, "actor/update_rms")
    step_lr = dict(run.series("actor/lr"))
    if all(step in step_lr for step, _ in series):
        ratios = [rms / step_lr[step] for step, rms in series]
        if len(ratios) < 2:
            return None
        ratio = median(ratios)
        if not ratio < t.update_rms_min:
            return None
        evidence = (f"`actor/update_rms` / `actor/lr` (the trained weights' motion per weight per step, over the "
                    f"step's learning rate) median {fmt(ratio)} over {len(series)} steps with a gradient, below "
                    f"update_rms_min {fmt(t.update_rms_min)}")
        severity = t.update_rms_min / max(ratio, 1e-30)
    else:
        if len(series) < 2 or lr is None:
            return None  # the changed share is no evidence for stochastic rounding, and nothing else is logged
        rms = median(values(series))
        if not rms < t.update_rms_min * lr:
            return None
        evidence = (f"`actor/update_rms` (the trained weights' motion per weight per step) median {fmt(rms)} over "
                    f"{len(series)} steps with a gradient, below update_rms_min {fmt(t.update_rms_min)} x `optim.lr` "
                    f"{fmt(lr)}")
        severity = t.update_rms_min * lr / max(rms, 1e-30)
    return Finding(
        "lost_updates", "Updates lost to precision (a frozen policy)", span(series), [evidence] + _ratio_line(run),
        f"Stochastic rounding moves the weights far less than AdamW asks: set `model.bf16_update`"
        f"{run.setting('model.bf16_update')} to kahan (or `model.dtype=auto`: float32 weights).",
        severity)


def _advice(run: RunData, dtype: str, update: str, lr: float | None) -> tuple[str, str]:
    """``(title, change)`` worded from the run's own setting."""
    now = f"`model.dtype`{run.setting('model.dtype')}"
    if dtype == "float32":
        return ("Few trained weights move per step",
                f"The weights are float32 ({now}): a step that changes few of them means most sampled weights "
                f"get no gradient (frozen or unused parameters) or `optim.lr`{run.setting('optim.lr')} is below "
                "float32's spacing; check which parameters the optimizer holds and the lr schedule.")
    if update == "plain":
        how = "plain AdamW" if _config(run, "model", "bf16_update") == "plain" else \
            "AdamW rounding to nearest (stochastic rounding is for bfloat16 only)"
        where = (f"at `optim.lr`{run.setting('optim.lr')} {how} loses the update of every {dtype} weight "
                 f"above |w| = {lr * LOST_ABOVE[dtype]:.2g} (half its spacing exceeds lr)") if lr else \
            f"{how} loses every update below half the weight's spacing"
        return ("Updates lost to precision (a frozen policy)",
                f"The optimizer's steps are rounded away: with {now} and `model.bf16_update`"
                f"{run.setting('model.bf16_update')}, {where}. Set `model.bf16_update=kahan` or `model.dtype=auto` "
                "(float32 weights, bfloat16 compute on a GPU).")
    other = "master" if update != "master" else "kahan"
    return ("Updates lost to precision (a frozen policy)",
            f"With {now} and `model.bf16_update`{run.setting('model.bf16_update')} the trained value barely moves: "
            f"check `optim.lr`{run.setting('optim.lr')}, try `model.bf16_update={other}`, or `model.dtype=auto` "
            "(float32 weights).")


@register_detector("lost_updates")
def lost_updates(run: RunData, t: Thresholds) -> Finding | None:
    if (zero := _lr_zero(run, t)) is not None:
        return zero
    dtype, update, lr = _settings(run)
    if update == "stochastic_rounding" and dtype == "bfloat16":
        return _stochastic(run, t, lr)
    if update == "stochastic_rounding":  # float16: LowPrecisionAdamW rounds to nearest, as plain does
        update = "plain"
    series = _moving(run, "actor/params_changed_frac")
    if len(series) < 2:
        return None
    frac = median(values(series))
    if not frac < t.params_changed_min:
        return None
    title, change = _advice(run, dtype, update, lr)
    evidence = [f"`actor/params_changed_frac` median {fmt(frac)} over {len(series)} steps with a gradient: only that "
                f"share of the sampled weights changed per step (float32 training changes 0.9 or more), below "
                f"params_changed_min {fmt(t.params_changed_min)}"] + _ratio_line(run)
    return Finding("lost_updates", title, span(series), evidence, change, t.params_changed_min / max(frac, 1e-3))
