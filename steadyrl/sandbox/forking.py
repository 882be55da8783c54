"""A fork whose child never comes back: :func:`fork_child`.

A library that forks inside its user's process (the trainer, a test runner) must keep the child out
of the user's code. From the instant after ``fork()`` the child is a copy of the caller's whole
stack: an exception or a ``return`` that leaves the child's body unwinds into the caller's frames,
and the copy goes on running the user's program - its loop, its ``finally`` blocks, its ``atexit``
functions, its buffered output, and whatever it writes to the descriptors it inherited (a
pytest-xdist worker's channel to its controller is one: a copy that ran on would send the
controller a second worker's messages). So:

* the child's body runs inside ``try``/``finally: os._exit(code)`` entered before anything else
  (code 0 when the body returns, :data:`FAILED` when it raises; nothing is printed: the parent's
  descriptors are not the child's to write to), so no exception, ``return``, ``sys.exit`` or
  signal ends the child any other way than ``os._exit`` - no ``atexit`` function runs and no
  inherited buffer is flushed;
* every signal is blocked across the ``fork()`` in the forking thread and unblocked in the child
  only inside that guard, so none of the caller's Python signal handlers (``KeyboardInterrupt``,
  a ``SIGTERM`` handler that raises) can run in the child before it; the parent's mask is
  restored as it was (also when ``fork()`` raises);
* a signal that arrived while they were blocked is handled as the mask is restored, in the
  parent, right after the fork: when its handler raises (``KeyboardInterrupt``), no caller will
  ever get the child's pid, so the child is killed and reaped before the exception goes on (else
  the trainer, interrupted during the fork, would keep a keeper nobody knows of);
* ``sys.stdout`` / ``sys.stderr`` are flushed before the fork, so text the caller had buffered is
  not written a second time by a child that prints.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings

__all__ = ["fork_child", "FAILED"]

FAILED = 70
"""The child's exit status when its body raised (``EX_SOFTWARE``)."""


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream must not stop the fork
            pass


def fork_child(body, *args) -> int:
    """Fork; the child runs ``body(*args)`` and ends in ``os._exit`` whatever happens (module
    docstring); the parent gets the child's pid (``OSError`` when the fork fails)."""
    _flush_std_streams()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    pid = -1
    try:
        with warnings.catch_warnings():
            # Python >= 3.12 warns on fork in a multi-threaded process: the child runs only the
            # body, and a lock left held by another thread ends in a time-out, not a hang.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
            if pid == 0:
                _child(body, args, mask)
    finally:
        if pid != 0:
            _restore_mask(mask, pid)
    return pid


def _restore_mask(mask, pid: int) -> None:
    """The parent's signal mask as it was; when a handler of a signal held across the fork raises,
    the child ``pid`` (when there is one) is killed and reaped first, then the exception goes on."""
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # the mask is set before any handler runs
    except BaseException:
        if pid > 0:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
        raise


def _child(body, args, mask) -> None:
    """The child's whole life (never returns)."""
    code = FAILED
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        body(*args)
        code = 0
    except BaseException:  # noqa: BLE001 - the child says nothing on the parent's descriptors
        pass
    finally:
        os._exit(code)
