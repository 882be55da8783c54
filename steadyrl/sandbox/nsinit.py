"""The sandbox's own pid namespace, and the small *init* process that is its pid 1 (Linux).

The keeper (:mod:`.child`) calls :func:`new_pid_namespace` before it forks; its one child, the
init, is then process 1 of a fresh pid namespace and the runner (the user's code) is the init's
child. What that gives, by the kernel's rules, not by code the sandbox runs:

* the trainer's pid, the keeper's and every other process outside do not exist in the
  namespace: ``os.kill(<trainer pid>, SIGKILL)`` fails with "no such process" (or hits a process
  of the sandbox itself);
* process 1 of a namespace receives from inside it only the signals it has a handler for, and
  the init installs none: ``SIGSTOP`` and ``SIGKILL`` to it from the user's code are dropped;
* when process 1 ends, the kernel kills every other process of the namespace: nothing can leave
  a pid namespace, so "kill the init" is "kill everything the user's code started". The init
  dies with the keeper (``PR_SET_PDEATHSIG`` SIGKILL), the runner with the init;
* the init mounts a fresh ``/proc`` in a mount namespace of its own, so the user's code sees only
  the sandbox's processes there (not the trainer's ``/proc/<pid>/environ`` nor its memory);
  the rest of the file system is the host's, unchanged.

As root the namespaces need nothing more; as another user a user namespace comes first (the
user's own uid mapped to itself), where the kernel allows unprivileged user namespaces. Where it
does not, :func:`new_pid_namespace` returns ``""`` and the sandbox runs without (its ``isolation``
says so, and the docs say what is lost).
"""

from __future__ import annotations

import ctypes
import os
import signal

from . import procs

__all__ = ["new_pid_namespace", "init_main", "CLONE_NEWNS", "CLONE_NEWPID", "CLONE_NEWUSER"]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
PR_SET_DUMPABLE = 4
_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _unshare(flags: int) -> bool:
    try:
        return _libc().unshare(ctypes.c_int(flags)) == 0
    except (OSError, AttributeError):
        return False


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


def new_pid_namespace() -> str:
    """Make this process's next child process 1 of a new pid namespace. Returns what was made:
    ``"pid"`` (root), ``"user+pid"`` (another user, in a user namespace of its own) or ``""``
    (the kernel refused: no namespace)."""
    if os.geteuid() == 0 and _unshare(CLONE_NEWPID):
        return "pid"
    uid, gid = os.geteuid(), os.getegid()
    if not _unshare(CLONE_NEWUSER | CLONE_NEWPID):
        return ""
    _write("/proc/self/setgroups", "deny")
    if _write("/proc/self/uid_map", f"{uid} {uid} 1\n") and _write("/proc/self/gid_map", f"{gid} {gid} 1\n"):
        return "user+pid"
    return "user+pid"  # unmapped ids read as nobody; the pid namespace holds all the same


def _own_proc() -> bool:
    """A mount namespace of its own, and in it a ``/proc`` of this pid namespace."""
    libc = _libc()
    if not _unshare(CLONE_NEWNS):
        return False
    if libc.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        return False
    return libc.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None) == 0


def _default_signals() -> None:
    """No handler may stay installed: process 1 receives from inside its namespace exactly the
    signals it has a handler for (SIGINT and SIGPIPE stay ignored: an ignored signal is not one)."""
    for sig in signal.valid_signals():
        try:
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass


def init_main(start_runner, report, namespace: str, fds_to_close=()) -> None:
    """The init's whole life (never returns): fork the runner (``start_runner(init pid, own /proc)``
    never returns either), close ``fds_to_close`` (the runner's), reap every process of the
    namespace, and when the runner ends ``report`` its exit status and exit (taking the namespace
    with it)."""
    code = 0
    try:
        _default_signals()
        procs.prctl(procs.PR_SET_PDEATHSIG, signal.SIGKILL)
        own_proc = bool(namespace) and os.getpid() == 1 and _own_proc()
        procs.prctl(PR_SET_DUMPABLE, 0)  # no ptrace, no /proc/1/mem for the user's code (not root)
        me = os.getpid()
        runner = os.fork()
        if runner == 0:
            procs.prctl(PR_SET_DUMPABLE, 1)
            start_runner(me, own_proc)
        for fd in fds_to_close:
            try:
                os.close(fd)
            except OSError:
                pass
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid == runner:
                report(status)
                break
    except BaseException:  # noqa: BLE001 - the keeper sees the init end and says the runner is gone
        code = 1
    os._exit(code)
