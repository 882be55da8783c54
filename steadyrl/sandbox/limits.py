"""Resource limits of a sandbox, and the environment it starts with.

``Limits`` (every field ``None`` = no limit of that kind):

* ``memory_mb`` (default 4096): address space the runner may *add*: ``RLIMIT_AS`` is set to the
  runner's virtual size once its target is ready (``VmSize``: for a forked trainer holding a torch
  model already many GB of mappings; for a fresh worker, after the target was rebuilt) plus
  ``memory_mb``. A ``MemoryError`` in the user's code, not the
  machine's OOM killer. Programs it starts with ``exec`` inherit the same absolute limit.
* ``cpu_s`` (default 600): CPU seconds one call may use (``RLIMIT_CPU``, re-armed before every
  call as the runner's CPU time so far plus ``cpu_s``; past it the kernel kills the runner with
  SIGXCPU). Its children inherit it, so a busy process that somehow escaped the sandbox still
  stops.
* ``processes`` (default 64): processes in the sandbox at once, the runner included. The keeper
  counts them every 0.1 s and kills the whole sandbox when there are more (the call fails with
  "more than N processes"). ``RLIMIT_NPROC`` is also set, to the user's current number of tasks
  plus ``processes``: it stops a fork loop at once, but it counts every process and thread of the
  *user*, and the kernel does not apply it to root at all - as root only the keeper's count holds,
  which bounds a loop of forks within 0.1 s but not a tight exponential fork bomb (run untrusted
  code as another user, or in a container with a ``pids`` cgroup limit).
  The ``code`` reward's programs (tagged ``STEADYRL_CODE``) are not counted: each runs under a
  keeper of its own with its own, smaller, ``processes`` limit, so one program's fork bomb fails
  that sample, not the worker scoring the batch.
* ``file_size_mb`` (default 1024): largest file the user's code may write (``RLIMIT_FSIZE``;
  Python sees ``OSError: File too large``).
* ``output_kib`` (default 64): the runner's stdout and stderr are kept, last ``output_kib`` KiB
  only, and shown in failure messages; nothing reaches the trainer's own output.

Environment: names that look like credentials are removed from the runner's environment (and from
the copy the kernel shows in ``/proc/<pid>/environ``): see :data:`SECRET_PATTERNS`, and every name
:func:`hide_env_name` was given (each ``{env: NAME}`` option the trainer resolved, whatever it is
called); names (or ``fnmatch`` patterns) in ``env_passthrough`` are kept. A fresh worker is
started with that environment (:func:`worker_environment`), so its initial block never held them.
"""

from __future__ import annotations

import ctypes
import fnmatch
import os
import resource
from dataclasses import dataclass

__all__ = ["Limits", "SECRET_PATTERNS", "secret_names", "scrub_environment", "apply_limits", "arm_cpu_limit",
           "hide_env_name", "user_tasks", "worker_environment"]

SECRET_PATTERNS: tuple[str, ...] = (
    "*TOKEN*", "*KEY*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "AWS_*",
    "SSH_AUTH_SOCK", "*_AUTH", "*COOKIE*",
)
"""Environment names (matched upper-cased) removed from a sandbox: HF_TOKEN, WANDB_API_KEY,
OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, ... ."""

MB = 1024 * 1024

_HIDDEN: set[str] = set()
"""Names whose values the trainer read as secrets (``{env: NAME}`` options, :mod:`steadyrl.secrets`):
removed from every sandbox whatever they are called."""


def hide_env_name(name: str) -> None:
    """Keep the variable ``name`` out of every sandbox started from now on (unless passed through)."""
    _HIDDEN.add(name)


@dataclass(frozen=True)
class Limits:
    """Per-sandbox limits (see the module docstring); ``None`` turns one off."""

    memory_mb: int | None = 4096
    cpu_s: int | None = 600
    processes: int | None = 64
    file_size_mb: int | None = 1024
    output_kib: int = 64

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_s", "processes", "file_size_mb", "output_kib"):
            value = getattr(self, name)
            if value is None and name != "output_kib":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"limits.{name}={value!r} must be an integer >= 1" +
                                 ("" if name == "output_kib" else " or None (no limit)"))


def secret_names(environ, passthrough=()) -> list[str]:
    """The names in ``environ`` that match :data:`SECRET_PATTERNS` and no ``passthrough`` pattern."""
    def keep(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in passthrough)

    return [n for n in environ
            if (n in _HIDDEN or any(fnmatch.fnmatchcase(n.upper(), p) for p in SECRET_PATTERNS)) and not keep(n)]


def worker_environment(passthrough=(), extra: dict | None = None) -> dict:
    """The environment a fresh worker is started with: this process's, credentials removed."""
    env = dict(os.environ)
    for name in secret_names(env, passthrough):
        del env[name]
    return {**env, **(extra or {})}


def _blank_initial_block(names: list[str]) -> None:
    """Zero ``NAME=value`` of ``names`` in the process's initial environment block (this process's
    private copy of it), which ``/proc/self/environ`` shows whatever ``os.environ`` says."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end: fields 50, 51 of stat
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except (OSError, IndexError, ValueError):
        return
    if len(block) > end - start:
        return
    wanted = {n.encode() for n in names}
    offset = 0
    for entry in block.split(b"\0"):
        if entry.split(b"=", 1)[0] in wanted:
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1


def scrub_environment(passthrough=()) -> list[str]:
    """Remove credential-like variables from this process's environment; the names removed."""
    names = secret_names(os.environ, passthrough)
    for name in names:
        os.environ.pop(name, None)
    if names:
        _blank_initial_block(names)
    return names


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def user_tasks() -> int:
    """Processes and threads of this user on the machine (``RLIMIT_NPROC`` counts them all)."""
    uid, count = os.getuid(), 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid == uid:
                count += len(os.listdir(f"/proc/{name}/task"))
        except OSError:
            continue
    return count


def _set(kind: int, value: int) -> None:
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        pass


def apply_limits(limits: Limits, tasks: int | None = None) -> None:
    """In the runner, once: address space, processes (``tasks``: :func:`user_tasks` counted before
    the sandbox's pid namespace hid the rest of the machine), file size."""
    if limits.memory_mb is not None:
        _set(resource.RLIMIT_AS, _vm_size() + limits.memory_mb * MB)
    if limits.processes is not None:
        _set(resource.RLIMIT_NPROC, (user_tasks() if tasks is None else tasks) + limits.processes)
    if limits.file_size_mb is not None:
        _set(resource.RLIMIT_FSIZE, limits.file_size_mb * MB)


def arm_cpu_limit(limits: Limits) -> None:
    """In the runner, before each call: a soft CPU limit ``cpu_s`` seconds past the time used so far."""
    if limits.cpu_s is None:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    value = int(usage.ru_utime + usage.ru_stime) + limits.cpu_s
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (value, hard))
    except (ValueError, OSError):
        pass
