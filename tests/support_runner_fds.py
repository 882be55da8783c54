"""The test runner's own descriptors are not the tests' to take (loaded by ``tests/conftest.py``).

A pytest-xdist worker talks to the controller over two pipes it holds above stdio (fds 3 and 4:
execnet's copies of its stdin and stdout). A test that put a file of its own on one of them, even
for a moment (``os.dup2(pipe, 3)`` to stand in for a scorer's verdict descriptor), made the worker's
reader fail on the next message from the controller: the worker stopped reading, finished the tests
it had, reported "finished", and the controller, which had sent it more, failed the whole run
(``INTERNALERROR ... assert not crashitem``), in about 1 run of 3.

So, in the test process itself (a child it forks is left alone: a sandbox's keeper replaces every
descriptor it inherited), ``os.dup2`` onto, ``os.close`` of and ``os.closerange`` over a pipe or socket
that was open when the session started raise :class:`RunnerDescriptorError` until it ends. A test that
needs a given descriptor number runs in an interpreter of its own. (A descriptor closed through an
object that owns it, ``socket.socket(fileno=3).close()`` or ``os.fdopen(3).close()``, is not seen.)
"""

from __future__ import annotations

import os
import stat

import pytest

__all__ = ["RunnerDescriptorError", "protect_runner_descriptors", "release_runner_descriptors", "pytest_sessionstart",
           "pytest_sessionfinish"]


class RunnerDescriptorError(OSError):
    """A test tried to replace or close one of the test runner's own descriptors."""


def _runner_descriptors() -> frozenset[int]:
    """The pipes and sockets above stdio open now (a worker's channel to the xdist controller)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: nothing is guarded
        return frozenset()
    kept = set()
    for fd in fds:
        try:
            mode = os.fstat(fd).st_mode
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if fd > 2 and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            kept.add(fd)
    return frozenset(kept)


_ORIGINAL = {"dup2": os.dup2, "close": os.close, "closerange": os.closerange}


def protect_runner_descriptors() -> frozenset[int]:
    """Guard the runner's descriptors in this process until :func:`release_runner_descriptors`
    (pytest's own copies of stdio, closed as the session ends, are among them); returns them."""
    guarded, owner = _runner_descriptors(), os.getpid()
    dup2, close, closerange = _ORIGINAL["dup2"], _ORIGINAL["close"], _ORIGINAL["closerange"]

    def refuse(call: str, fd: int) -> None:
        if fd in guarded and os.getpid() == owner:
            raise RunnerDescriptorError(
                f"{call}: fd {fd} is the test runner's (a pipe or socket open when the session started: in a "
                f"pytest-xdist worker, its channel to the controller); run code that needs that descriptor "
                f"number in a subprocess (tests/support_runner_fds.py)")

    def guarded_dup2(fd, fd2, inheritable=True):
        refuse(f"os.dup2({fd}, {fd2})", fd2)
        return dup2(fd, fd2, inheritable)

    def guarded_close(fd):
        refuse(f"os.close({fd})", fd)
        return close(fd)

    def guarded_closerange(fd_low, fd_high):
        for fd in sorted(guarded):
            if fd_low <= fd < fd_high:
                refuse(f"os.closerange({fd_low}, {fd_high})", fd)
        return closerange(fd_low, fd_high)

    os.dup2, os.close, os.closerange = guarded_dup2, guarded_close, guarded_closerange
    return guarded


def release_runner_descriptors() -> None:
    """``os.dup2``, ``os.close`` and ``os.closerange`` as they were."""
    os.dup2, os.close, os.closerange = _ORIGINAL["dup2"], _ORIGINAL["close"], _ORIGINAL["closerange"]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """The hooks ``tests/conftest.py`` imports: guarded for the session, released at its end."""
    protect_runner_descriptors()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    release_runner_descriptors()
