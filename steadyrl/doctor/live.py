"""The doctor during ``steadyrl train``: the run-triage detectors every ``trainer.doctor_every`` steps.

The recipe makes one :class:`LiveDoctor` per run and calls it twice a step:

* :meth:`LiveDoctor.check` before the step's metrics are logged: every ``doctor_every`` steps the
  detectors (:data:`~steadyrl.doctor.DETECTORS`, thresholds ``trainer.doctor_thresholds``) read the
  run's metrics so far (those of a resumed run's earlier steps included) and its logged samples; a
  detector that fires for the first time prints one line, and ``health/doctor_findings`` (logged every
  step) counts the distinct detectors that have fired;
* :meth:`LiveDoctor.halt_if_asked` after the step is saved: when a detector named in
  ``trainer.halt_on`` fired, the state is checkpointed, ``report.md`` written, and the run stops
  with :class:`~steadyrl.errors.DoctorHalted` (exit status 1, the message says how to continue);
* :meth:`LiveDoctor.finish` at the end of the run: ``report.md`` in the run directory, and one
  ``doctor: withdrawn: ...`` line for each finding printed mid-run that the final report does not
  make, or a ``doctor: revised: ...`` line when it keeps the detector with another claim (a title that
  differs). A live line reads the steps so far and says so ("so far", "provisional"): the end of the
  run may bear it out or not, and the user is told which.

The detectors that the final report quiets on a run that solved its prompts (``solved_frac``:
entropy falling and groups all solved are convergence, :data:`CONVERGENCE_QUIETED`) wait mid-run
while the reward is still rising (:func:`still_learning`): a run on its way to solving its prompts
is not called collapsed half-way and healthy at the end. They print once the reward has stopped
rising short of solved, as the final report would say.

Nothing halts unless ``trainer.halt_on`` asks. A detector that had already fired before a resume
counts but neither prints nor halts again (continuing a halted run with ``--resume`` trains on); if the
final report does not make it, the end withdraws it too ("found by step N, before the resume").
Only the main process reads files and prints; the halt decision is shared by every rank.
"""

from __future__ import annotations

import re
from pathlib import Path

from .. import distributed as dist
from ..printable import printable
from ..errors import DoctorHalted
from ..tracking.tracker import read_metrics, read_samples
from . import diagnose
from .findings import Finding
from .learning import training_reward
from .run import RunData, fmt, mean, values
from ..config.doctor_thresholds import Thresholds

FINDINGS_METRIC = "health/doctor_findings"
"""Distinct detectors that have fired so far in the run (cumulative), logged every step."""


CONVERGENCE_QUIETED = ("entropy_collapse", "zero_variance")
"""Detectors that stay quiet on a solved run (:func:`steadyrl.doctor.learning.solved`)."""


def still_learning(run: RunData, t: Thresholds) -> bool:
    """The reward that trains (``reward/mean``; pure distillation: ``-distill/reverse_kl``) over the
    last ``window_frac`` of the steps so far is above the window before it by more than
    ``reward_rise``: the run is still improving, so whether it will solve its prompts is not known yet."""
    series = training_reward(run)
    width = max(2, int(len(series) * t.window_frac))
    if len(series) < 2 * width:
        return False
    return mean(values(series[-width:])) - mean(values(series[-2 * width:-width])) > t.reward_rise


def thresholds_from(settings: dict[str, float]) -> Thresholds:
    """``trainer.doctor_thresholds`` (a dict ``name -> value``) as :class:`Thresholds`; a
    :class:`~steadyrl.errors.ConfigError` naming an unknown name or a bad value."""
    return Thresholds().with_overrides([f"{k}={v}" for k, v in settings.items()], key="trainer.doctor_thresholds")


def one_line(step: int, f: Finding) -> str:
    """The line printed when ``f`` fires for the first time: provisional (the steps so far), as the
    final report judges the whole run and may not stand by it (:meth:`LiveDoctor.finish` says so)."""
    evidence = f.evidence[0] if f.evidence else ""  # it may quote a domain or reward name: escaped, as in report.md
    return printable(f"doctor: step {step}, so far: {f.title} (`{f.detector}`, steps {fmt(f.steps[0])}-"
                     f"{fmt(f.steps[1])}): {evidence}; provisional: report.md judges the whole run at the end "
                     "(steadyrl doctor RUN_DIR for the change to make)", keep="")


def withdrawn_line(detector: str, step: int, title: str, *, before_resume: bool = False) -> str:
    """The line :meth:`LiveDoctor.finish` prints for a live finding the final report does not make
    (``before_resume``: one the steps before a resume showed, ``step`` the resumed-from step)."""
    when = f"found by step {step}, before the resume" if before_resume else f"printed at step {step}"
    return (f"doctor: withdrawn: {title} (`{detector}`, {when}) does not hold over the whole run "
            "(the final report does not list it)")


def revised_line(detector: str, step: int, title: str, final: str) -> str:
    """The line :meth:`LiveDoctor.finish` prints for a live finding whose detector the final report keeps
    with another claim (a truncation rate "rising" mid-run that is "high but falling" over the whole run)."""
    return (f"doctor: revised: {title} (`{detector}`, printed at step {step}) does not hold over the whole run: "
            f"the final report says {final}")


class LiveDoctor:
    """The run's in-run detectors; ``every == 0`` turns them off (no metric, no line)."""

    def __init__(self, out_dir: Path, config: dict, *, every: int, halt_on: list[str],
                 thresholds: dict[str, float], upto_step: int = 0) -> None:
        self.out_dir, self.config, self.every = Path(out_dir), config, every
        self.halt_on = list(halt_on)
        self.thresholds = thresholds_from(thresholds)
        self.rows: list[dict] = []
        self.fired: set[str] = set()
        self.printed: dict[str, tuple[int, str]] = {}  # detector -> (step, title) printed in this process
        self.before: dict[str, str] = {}  # a resumed run: detector -> title found over the steps before it
        self.upto_step = upto_step
        self.halting: Finding | None = None
        if every and dist.is_main() and upto_step:  # a resumed run: what fired before counts, silently
            self.rows = [r for r in read_metrics(self.out_dir) if r.get("step", 0) <= upto_step]
            self.before = {f.detector: f.title for f in self._diagnose()}
            self.fired = set(self.before)

    def _diagnose(self, *, mid_run: bool = False) -> list[Finding]:
        run = RunData(self.out_dir, self.rows, read_samples(self.out_dir), self.config)
        found = diagnose(run, self.thresholds) if run.steps else []
        if mid_run and still_learning(run, self.thresholds):  # converging or not: not known yet
            found = [f for f in found if f.detector not in CONVERGENCE_QUIETED]
        return found

    def check(self, step: int, metrics: dict) -> list[Finding]:
        """Add ``health/doctor_findings`` to ``metrics``; every ``every`` steps run the detectors and
        print a line for each that fires for the first time; returns those new findings."""
        if not self.every:
            return []
        new: list[Finding] = []
        if dist.is_main():
            self.rows.append({"step": step, **{k: float(v) for k, v in metrics.items() if _number(v)}})
            if step % self.every == 0:
                new = [f for f in self._diagnose(mid_run=True) if f.detector not in self.fired]
                for f in new:
                    self.fired.add(f.detector)
                    self.printed[f.detector] = (step, f.title)
                    print(one_line(step, f), flush=True)
                    if f.detector in self.halt_on and self.halting is None:
                        self.halting = f
        metrics[FINDINGS_METRIC] = float(len(self.fired))
        return new

    def halt_if_asked(self, step: int, save) -> None:
        """Stop the run (state saved by ``save(step)``) when a ``trainer.halt_on`` detector fired."""
        if not (self.every and self.halt_on and step % self.every == 0):
            return
        halt = dist.all_reduce_max(1.0 if self.halting is not None else 0.0) > 0  # every rank stops together
        if not halt:
            return
        path = save(step)
        self.finish()
        f = self.halting
        what = f"`{f.detector}` ({f.title})" if f is not None else "a trainer.halt_on detector"
        raise DoctorHalted(printable(  # the evidence may quote a domain or reward name: escaped
            f"doctor: {what} fired at step {step} and trainer.halt_on lists it: "
            + (f"{f.evidence[0]}. Change: {f.advice} " if f is not None and f.evidence else "")
            + f"The state is saved in {path}; `steadyrl doctor {self.out_dir}` writes the full report; "
            f"`steadyrl train --output-dir {self.out_dir} --resume` continues (it does not halt again "
            "for a detector that already fired).", keep=""))


    def finish(self) -> Path | None:
        """Write ``report.md`` into the run directory (main process) and say what it found in one line."""
        if not dist.is_main():
            return None
        from . import write_report

        written = write_report(self.out_dir)
        if written is None:
            return None
        path, findings, verdict = written
        final = {f.detector: f.title for f in findings}
        for detector, (step, title) in self.printed.items():
            if detector not in final:  # a live line the whole run does not bear out: say so, once
                print(withdrawn_line(detector, step, title), flush=True)
            elif _claim(final[detector]) != _claim(title):  # the same detector, another claim: not kept either
                print(revised_line(detector, step, title, final[detector]), flush=True)
        for detector, title in self.before.items():  # found before a resume (a halt's line): the end says too
            if detector not in final and detector not in self.printed:
                print(withdrawn_line(detector, self.upto_step, title, before_resume=True), flush=True)
        self.before = {d: t for d, t in self.before.items() if d in final}
        self.printed = {d: v for d, v in self.printed.items() if d in final}
        print(f"doctor: {path}: {verdict}", flush=True)
        return path


def _claim(title: str) -> str:
    """A finding's title without a trailing count: "Gradient-norm spikes (2)" mid-run and "(5)" at the end
    make one claim."""
    return re.sub(r" \(\d+\)$", "", title)


def _number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, (bool, str))
