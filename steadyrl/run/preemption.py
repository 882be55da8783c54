"""SIGTERM (preemption: SLURM, Kubernetes, a spot instance) stops ``steadyrl train`` as Ctrl-C
does, and saves first where it safely can.

* During the step loop, SIGTERM is deferred: the current step finishes (a step cut in the middle
  would leave a half-made update), a checkpoint of it is saved, and the run stops with the
  command that continues it (``steadyrl: interrupted; to continue from ... run: steadyrl train
  --output-dir RUN --resume``, exit status 130 as for Ctrl-C). A second SIGTERM while the step
  finishes stops at once, as a second Ctrl-C would. Under ``torchrun`` every rank stops after the
  same step (the flag is reduced over the ranks each step).
* Elsewhere (building, the evaluation before step 1), SIGTERM stops at once, like Ctrl-C, with
  the same hint (the newest checkpoint, or step 0).

The handler is installed only in the main thread (Python's rule) and the previous one restored
when the run ends.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

from .. import distributed as dist

__all__ = ["SigtermStop"]


class SigtermStop:
    """A context manager: ``with SigtermStop() as stop`` installs the handler; ``stop.deferred()``
    marks the step loop; ``stop.save_if_asked(step, save)`` after each step saves and stops."""

    def __init__(self) -> None:
        self.requested = False
        self._deferring = False
        self._previous = None

    def __enter__(self) -> SigtermStop:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _handle(self, signum, frame) -> None:
        if self._deferring and not self.requested:
            self.requested = True
            print("steadyrl: SIGTERM: finishing this step, saving a checkpoint, then stopping "
                  "(a second SIGTERM stops at once)", file=sys.stderr, flush=True)
            return
        raise KeyboardInterrupt("SIGTERM")  # the run's Ctrl-C path prints how to continue

    @contextmanager
    def deferred(self):
        """The step loop: a SIGTERM in here waits for the step's end (:meth:`save_if_asked`)."""
        self._deferring = True
        try:
            yield self
        finally:
            self._deferring = False

    def save_if_asked(self, step: int, save) -> None:
        """After step ``step``: when a SIGTERM came (on any rank), ``save(step)`` and stop as Ctrl-C does."""
        if dist.all_reduce_max(float(self.requested)) > 0:
            self._deferring = False  # from here a second SIGTERM stops at once
            save(step)
            raise KeyboardInterrupt("SIGTERM")
