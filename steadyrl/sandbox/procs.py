"""Finding and killing every process a sandbox started, from ``/proc`` (Linux).

A sandbox is a *keeper* process (forked or exec'd from the trainer; its own session, so its pid is
also its session and process-group id), below it an *init* (process 1 of the sandbox's own pid
namespace, :mod:`.nsinit`) and below that a *runner* that runs the user's code. With the pid
namespace, killing the init kills every process the user's code started - the kernel's rule, and
no process can leave a pid namespace; the rules below are what finds them all the same (and all
there is where the kernel gave no namespace). A process started by the user's code belongs to the
sandbox when any of these holds:

* it descends from the keeper (parent links in ``/proc/<pid>/stat``). The keeper is a *child
  subreaper* (``PR_SET_CHILD_SUBREAPER``), so a process whose parent died - a double fork, a
  daemon - is re-parented to the keeper, not to init, and stays found while the keeper lives;
* its session or process group is the keeper's (it never called ``setsid`` / ``setpgid``);
* its environment holds the sandbox's tag (``STEADYRL_SANDBOX=<tag>``): every program started
  with ``exec`` from inside the sandbox carries it, even one that left the session and whose
  ancestors are dead.

What is *not* found, without a pid namespace only: a process that left the session (``setsid``)
and never called ``exec`` (or cleared its environment), once its chain of parents up to the keeper
is broken because the keeper itself was killed first (only the user's code can do that, and only
without the namespace: inside it the keeper does not exist). Such a process still has the limits
it inherited (CPU seconds, memory).

:func:`kill_all` kills round after round until two scans in a row find nothing (a process that
forks while it is being killed is caught by the next round), for at most ``budget_s``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

__all__ = ["TAG_VAR", "CODE_TAG_VAR", "prctl", "proc_table", "members", "counted", "kill_all", "PR_SET_PDEATHSIG",
           "PR_SET_CHILD_SUBREAPER"]

TAG_VAR = "STEADYRL_SANDBOX"
CODE_TAG_VAR = "STEADYRL_CODE"
"""The tag of a code program's harness and all below it (:mod:`.programs`): they have a keeper and
a process limit of their own, so the sandbox they run in (the reward worker) does not count them."""
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_LIBC = None


def prctl(option: int, arg: int) -> bool:
    """``prctl(option, arg)`` through libc; ``False`` where it is not available or fails."""
    global _LIBC
    if not sys.platform.startswith("linux"):
        return False
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL(None, use_errno=True)
        return _LIBC.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """``(ppid, pgid, sid, state)`` of ``pid``, or ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2:].split()
    try:
        return int(fields[1]), int(fields[2]), int(fields[3]), fields[0].decode()
    except (IndexError, ValueError):
        return None


def proc_table() -> dict[int, tuple[int, int, int, str]]:
    """Every live process: ``pid -> (ppid, pgid, sid, state)`` (zombies and dead ones left out)."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            row = _stat(int(name))
            if row is not None and row[3] not in ("Z", "X", "x"):
                table[int(name)] = row
    return table


def _tagged(pids, tag: bytes) -> set[int]:
    """The processes of ``pids`` whose environment holds ``tag`` (the environment is read as
    ``\0NAME=value\0...``, so ``b"\0NAME="`` finds a variable wherever it stands)."""
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if tag in b"\0" + f.read():
                    found.add(pid)
        except OSError:
            continue
    return found


def counted(pids: set[int]) -> set[int]:
    """The processes of ``pids`` a sandbox's process limit counts: all but those of a code program,
    which its own keeper counts against its own, smaller, limit (a fork bomb among them must cost
    that program alone, not the worker and every sample it was scoring). They are still members:
    :func:`kill_all` kills them with the rest."""
    return pids - _tagged(pids, f"\0{CODE_TAG_VAR}=".encode())


def keeper_alive_as_ours(keeper: int, table: dict) -> bool:
    """Whether the process ``keeper`` in ``table`` is the sandbox's keeper: a session leader whose
    parent is this process (the trainer) or who is this process."""
    ppid, _, sid, _ = table[keeper]
    return sid == keeper and ppid == os.getpid() or keeper == os.getpid()


def members(keeper: int, tag: str | None = None, table: dict | None = None, tag_var: str = TAG_VAR) -> set[int]:
    """The live processes of the sandbox whose keeper is ``keeper`` (the keeper not included);
    ``tag`` is looked for as ``<tag_var>=<tag>`` in their environments.

    Session and process group are matched only while ``keeper`` is not some other live process:
    once the keeper is reaped, its pid may be handed to an unrelated session leader (the kernel
    frees a pid only when no process uses it as a session or group id any more)."""
    table = proc_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), list(children.get(keeper, ()))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, ()))
    if keeper not in table or keeper_alive_as_ours(keeper, table):
        found |= {pid for pid, (_, pgid, sid, _) in table.items() if keeper in (pgid, sid)}
    if tag:
        found |= _tagged(set(table) - found, f"{tag_var}={tag}\0".encode())
    found.discard(keeper)
    found.discard(os.getpid())
    return found


def kill_all(keeper: int, tag: str | None, *, budget_s: float = 2.0, with_keeper: bool = True,
             tag_var: str = TAG_VAR) -> int:
    """SIGKILL every member of the sandbox, leaves first, then (``with_keeper``) the keeper; returns
    how many processes were signalled. Rounds go on until two scans in a row find nothing."""
    deadline, killed, quiet = time.monotonic() + budget_s, 0, 0
    while quiet < 2 and time.monotonic() < deadline:
        found = members(keeper, tag, tag_var=tag_var)
        quiet = 0 if found else quiet + 1
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        if found:
            time.sleep(0.005)
    if with_keeper:
        try:
            os.kill(keeper, signal.SIGKILL)
            killed += 1
        except OSError:
            pass
    return killed
