"""Progress of long work (training steps, evaluation, generation): a bar on a terminal, a line now
and then elsewhere.

``progress(total, desc)`` shows a tqdm bar with the rate, the ETA and a few key metrics when it
writes to a terminal. When it does not (output piped or redirected to a file), or when ``CI`` or
``STEADYRL_NO_PROGRESS`` is set, it prints instead one concise line every ~10 % of the work or
every ``interval_s`` seconds, whichever comes first, plus a last line when it closes, so CI logs
stay readable::

    [train] 40/200 (20%) | 3.05 s/it | elapsed 2m02s | eta 8m08s | reward 0.412 | kl 0.0031

Usage::

    with progress(total_steps, "train") as bar:
        for step in ...:
            bar.update(reward=m["reward/mean"], kl=m["kl/k3"])
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import IO, Any

__all__ = ["Progress", "format_duration", "progress", "progress_bar_wanted", "train_fields"]

_FALSE = {"", "0", "false", "no", "off"}


def train_fields(metrics: dict, teacher=None) -> dict[str, Any]:
    """What a training step's line shows: the reward that trains. Without a teacher ``reward`` (the
    task's ``reward/mean``); with one (``teacher.name_or_path``) also ``rkl`` (``distill/reverse_kl``,
    falling as the student learns); in pure distillation (``teacher.task_rewards: false``) the task's
    reward enters the advantage as 0, so it shows as ``task`` after ``rkl``, not as ``reward``."""
    task, rkl = metrics.get("reward/mean"), metrics.get("distill/reverse_kl")
    if teacher is None or not getattr(teacher, "name_or_path", None):
        return {"reward": task, "len": metrics.get("response/length_mean")}
    if getattr(teacher, "task_rewards", True):
        return {"reward": task, "rkl": rkl, "len": metrics.get("response/length_mean")}
    return {"rkl": rkl, "task": task, "len": metrics.get("response/length_mean")}


def _env_on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in _FALSE


def progress_bar_wanted(stream: IO[str] | None = None) -> bool:
    """True when an interactive bar suits ``stream`` (default stderr): a TTY, not CI, not opted out."""
    stream = sys.stderr if stream is None else stream
    if _env_on("CI") or _env_on("STEADYRL_NO_PROGRESS"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def format_duration(seconds: float) -> str:
    """``75.2`` -> ``"1m15s"``; ``4000`` -> ``"1h06m"``; ``float('nan')`` -> ``"?"``."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    try:
        return f"{float(value):.4g}"  # tensors, numpy scalars
    except (TypeError, ValueError, RuntimeError):
        return str(value)


class Progress:
    """A progress display; see :func:`progress`. ``mode`` is ``"bar"``, ``"lines"`` or ``"off"``."""

    def __init__(self, total: int | None, desc: str, mode: str, *, every: int | None = None,
                 interval_s: float = 60.0, file: IO[str] | None = None, initial: int = 0):  # fmt: skip
        self.total, self.desc, self.mode = total, desc, mode
        self.file = file
        self.n = self.initial = initial  # a resumed run counts on from the step it resumed at
        self.metrics: dict[str, Any] = {}
        self.every = every or (max(1, (total - initial) // 10) if total else 10)
        self.interval_s = interval_s
        self._start = self._last_print = time.monotonic()
        self._printed_n = initial
        self._bar = None
        if mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, file=file, dynamic_ncols=True, unit="it", initial=initial)

    def update(self, n: int = 1, **metrics: Any) -> None:
        """Advance by ``n`` and show ``metrics`` (e.g. ``reward=0.41, kl=0.003, step_s=3.1``);
        a metric given as ``None`` (not logged this step) keeps its last value."""
        self.n += n
        metrics = {k: v for k, v in metrics.items() if v is not None}
        self.metrics.update(metrics)
        if self._bar is not None:
            if metrics:
                self._bar.set_postfix({k: _fmt(v) for k, v in self.metrics.items()}, refresh=False)
            self._bar.update(n)
        elif self.mode == "lines":
            now = time.monotonic()
            if self.n - self._printed_n >= self.every or now - self._last_print >= self.interval_s:
                self._print_line(now)

    def line(self, now: float | None = None) -> str:
        """The one-line summary printed in ``"lines"`` mode."""
        now = time.monotonic() if now is None else now
        elapsed, done = now - self._start, self.n - self.initial
        rate = elapsed / done if done else float("nan")  # seconds per unit done in this process
        parts = [f"[{self.desc}] {self.n}" + (f"/{self.total} ({100 * self.n / self.total:.0f}%)" if self.total else "")]
        if done:
            parts.append(f"{rate:.3g} s/it" if rate >= 1 else f"{1 / rate:.3g} it/s" if rate > 0 else "")
        parts.append(f"elapsed {format_duration(elapsed)}")
        if self.total and self.n < self.total:
            parts.append(f"eta {format_duration(rate * (self.total - self.n))}")
        parts += [f"{k} {_fmt(v)}" for k, v in self.metrics.items()]
        return " | ".join(p for p in parts if p)

    def _print_line(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        print(self.line(now), file=self.file or sys.stderr, flush=True)
        self._printed_n, self._last_print = self.n, now

    def close(self) -> None:
        """End the display (in ``"lines"`` mode: a last line, unless the last one is current)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.mode == "lines" and self.n != self._printed_n:
            self._print_line()
        self.mode = "off"

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(total: int | None, desc: str, *, enabled: bool | None = None, is_main_process: bool = True,
             every: int | None = None, interval_s: float = 60.0, file: IO[str] | None = None,
             initial: int = 0) -> Progress:  # fmt: skip
    """A progress display for ``total`` units of work (``None``: unknown).

    Args:
        enabled: ``None`` (default) picks: a bar on a terminal, lines otherwise (and in CI, or when
            ``STEADYRL_NO_PROGRESS`` is set). ``True`` forces the bar, ``False`` forces lines.
        is_main_process: other ranks show nothing.
        every: in lines mode, print every this many units (default ~10 % of ``total``).
        interval_s: in lines mode, print at least this often while work advances.
        file: where to write (default stderr).
        initial: units already done (a resumed run's step): counts and percentages are of the
            whole ``total``, the rate and ETA of the units done since.
    """
    if not is_main_process:
        mode = "off"
    elif enabled is None:
        mode = "bar" if progress_bar_wanted(file) else "lines"
    else:
        mode = "bar" if enabled else "lines"
    return Progress(total, desc, mode, every=every, interval_s=interval_s, file=file, initial=initial)
