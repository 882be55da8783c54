"""One cgroup per ``code`` sample, where the machine lets this process make one: the sample's
memory (every process of it together, its tmpfs included) and its number of processes are one
budget the kernel keeps, not a limit per process (rlimits) that several processes multiply.

Looked for below this process's own cgroup (so a container's limits still hold above it): cgroup
v2 (``memory.max``, ``pids.max``; the parent must have the ``memory`` and ``pids`` controllers in
its ``cgroup.subtree_control``), else cgroup v1's ``memory`` (``memory.limit_in_bytes``, and
``memory.memsw.limit_in_bytes`` where swap is accounted) and ``pids`` hierarchies. Where neither
can be written (cgroups not delegated to this user: most rootless setups), :func:`create` returns
``None`` and the rlimits per process are all there is (``reward/code/isolation_level`` says so).
A sample's cgroup is removed with the sample; one left by a reward worker killed mid-sample is
removed by a later sample's :func:`create` once it is a minute old and empty.

CPU: where the ``cpu`` controller is there too (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), the
sample's processes together get at most ``cpus`` cores (:data:`SAMPLE_CPUS`), so its CPU time is
bounded by the kernel at ``cpus x`` its wall-clock time limit however many processes it starts, and
samples running side by side cannot starve each other or the trainer. Best effort: without the
controller the CPU limit is ``RLIMIT_CPU`` per process, and :attr:`SampleCgroup.cpu_limited` is False.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["SampleCgroup", "create", "available"]

ROOT = "/sys/fs/cgroup"
SAMPLE_CPUS = 1.0
"""Cores one sample's processes may use together (a rate: quota per period of the ``cpu`` controller)."""
CPU_PERIOD_US = 100_000
PREFIX = "steadyrl-"
STALE_S = 60.0
"""A sample cgroup this old with no process left is a leftover (its reward worker was killed
before it could remove it): :func:`create` removes such ones next to the one it makes."""
_last_sweep: dict[str, float] = {}


def _own(controller: str) -> str | None:
    """This process's cgroup path in the hierarchy of ``controller`` (``""``: v2)."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    return None


def _v2_parent() -> str | None:
    own = _own("")
    for mount in (ROOT, os.path.join(ROOT, "unified")):
        if own is None or not os.path.exists(os.path.join(mount, "cgroup.controllers")):
            continue
        parent = os.path.join(mount, own.lstrip("/"))
        try:
            with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                enabled = f.read().split()
        except OSError:
            continue
        if {"memory", "pids"} <= set(enabled):
            return parent
    return None


def _write(path: str, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


class SampleCgroup:
    """The cgroup directories of one sample (one on v2; ``memory`` and ``pids`` on v1)."""

    def __init__(self, dirs: list[str], version: int, cpu_limited: bool = False):
        self.dirs, self.version, self.cpu_limited = dirs, version, cpu_limited

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        found = set()
        for path in self.procs_files:
            try:
                with open(path) as f:
                    found.update(int(x) for x in f.read().split())
            except (OSError, ValueError):
                pass
        return found

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the sample for its memory."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(self.dirs[0], name)) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        except (OSError, ValueError):
            pass
        return False

    def remove(self) -> None:
        """Kill every process left in it, then remove it."""
        for _ in range(100):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.005)
        for d in self.dirs:
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # the last process is still being torn down
                    time.sleep(0.005)


def _sweep(parent: str) -> None:
    """Remove the leftover sample cgroups in ``parent`` (at most once a minute per parent): an
    ``rmdir`` fails on a cgroup that still has a process, and a young one is left alone (made, not
    yet joined)."""
    now = time.time()
    if now - _last_sweep.get(parent, 0.0) < STALE_S:
        return
    _last_sweep[parent] = now
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(parent, name)
        try:
            if now - os.stat(path).st_mtime > STALE_S:
                os.rmdir(path)
        except OSError:
            pass


def _quota(cpus: float) -> int:
    return max(1000, int(cpus * CPU_PERIOD_US))


def _cpu_v2(path: str, cpus: float) -> bool:
    """``cpu.max`` of the sample's v2 cgroup, where the parent delegates the ``cpu`` controller."""
    try:
        _write(os.path.join(path, "cpu.max"), f"{_quota(cpus)} {CPU_PERIOD_US}")
        return True
    except OSError:
        return False


def _cpu_v1(name: str, cpus: float) -> str | None:
    """The sample's directory in cgroup v1's ``cpu`` hierarchy with its quota, or None."""
    own = _own("cpu")
    if own is None:
        return None
    path = os.path.join(ROOT, "cpu", own.lstrip("/"), name)
    try:
        _sweep(os.path.dirname(path))
        os.mkdir(path)
    except OSError:
        return None
    try:
        _write(os.path.join(path, "cpu.cfs_period_us"), CPU_PERIOD_US)
        _write(os.path.join(path, "cpu.cfs_quota_us"), _quota(cpus))
        return path
    except OSError:
        SampleCgroup([path], 1).remove()
        return None


def create(name: str, *, memory_bytes: int, pids: int, cpus: float = SAMPLE_CPUS) -> SampleCgroup | None:
    """A new cgroup ``name`` below this process's own with the memory and task limits (and, where
    the ``cpu`` controller can be written, ``cpus`` cores), or ``None`` where none can be made here."""
    made: list[str] = []
    try:
        parent = _v2_parent()
        if parent is not None:
            _sweep(parent)
            made.append(os.path.join(parent, name))
            os.mkdir(made[-1])
            _write(os.path.join(made[-1], "memory.max"), memory_bytes)
            if os.path.exists(os.path.join(made[-1], "memory.swap.max")):
                _write(os.path.join(made[-1], "memory.swap.max"), 0)
            _write(os.path.join(made[-1], "pids.max"), pids)
            return SampleCgroup(made, 2, cpu_limited=_cpu_v2(made[-1], cpus))
        memory, pid_root = _own("memory"), _own("pids")
        if memory is None or pid_root is None:
            return None
        made.append(os.path.join(ROOT, "memory", memory.lstrip("/"), name))
        _sweep(os.path.dirname(made[-1]))
        os.mkdir(made[-1])
        _write(os.path.join(made[-1], "memory.limit_in_bytes"), memory_bytes)
        try:
            _write(os.path.join(made[-1], "memory.memsw.limit_in_bytes"), memory_bytes)
        except OSError:
            pass  # swap not accounted
        made.append(os.path.join(ROOT, "pids", pid_root.lstrip("/"), name))
        _sweep(os.path.dirname(made[-1]))
        os.mkdir(made[-1])
        _write(os.path.join(made[-1], "pids.max"), pids)
        cpu_dir = _cpu_v1(name, cpus)
        return SampleCgroup(made + ([cpu_dir] if cpu_dir else []), 1, cpu_limited=cpu_dir is not None)
    except OSError:
        SampleCgroup([d for d in made if os.path.isdir(d)], 1).remove()
        return None


def available() -> bool:
    """Whether a sample cgroup can be made here (made and removed at once)."""
    group = create(f"{PREFIX}probe-{os.getpid()}", memory_bytes=64 << 20, pids=8)
    if group is None:
        return False
    group.remove()
    return True
