"""How many pytest-xdist workers ``make test`` starts where ``TEST_WORKERS=auto`` (standard library only:
it runs before the virtual environment exists)::

    workers = max(1, min(cores, cpu_quota, available_mib // mib_per_worker, 4))
    available_mib = min(MemAvailable, cgroup memory limit - cgroup usage)

``cores`` are the ones this process may run on (``taskset`` counts), ``cpu_quota`` the cgroup's
``cpu.max`` (v2) or ``cpu.cfs_quota_us / cpu.cfs_period_us`` (v1), rounded up, and the memory limit
the cgroup's ``memory.max`` / ``memory.current`` (v2) or ``memory.limit_in_bytes`` /
``memory.usage_in_bytes`` (v1): a container's own limits, which ``/proc/meminfo`` and ``nproc`` do
not show (a 6 GiB container on a 64 GiB host would otherwise start 4 workers). The cgroup is the
one ``/proc/self/cgroup`` names, under ``/sys/fs/cgroup``. A value that cannot be read bounds
nothing. ``python tools/xdist_workers.py [MIB_PER_WORKER]`` prints the number.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

MAX_WORKERS = 4


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_dirs(proc: Path, root: Path) -> tuple[list[Path], list[Path]]:
    """The process's cgroup directories: ``(v2 ones, v1 memory/cpu ones)``, own first, then the root."""
    v2, v1 = [], []
    for line in (_read(proc / "self" / "cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        rel = parts[2].lstrip("/")
        if parts[0] == "0" and parts[1] == "":
            v2.append(root / rel)
        for controller in parts[1].split(","):
            if controller in ("memory", "cpu"):
                v1.append(root / controller / rel)
    return v2 + [root], v1 + [root / "memory", root / "cpu"]


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def cgroup_memory_mib(proc: Path, root: Path) -> int | None:
    """The memory the cgroup still allows, in MiB (``None``: no limit found)."""
    v2, v1 = _cgroup_dirs(proc, root)
    found = []
    for folder, limit, usage in ([(d, "memory.max", "memory.current") for d in v2]
                                 + [(d, "memory.limit_in_bytes", "memory.usage_in_bytes") for d in v1]):
        cap, used = _int(_read(folder / limit)), _int(_read(folder / usage))
        if cap is not None and used is not None and cap < 1 << 62:  # v1 says 2^63 - 4096 for "none"
            found.append(max(0, cap - used) // (1 << 20))
    return min(found) if found else None


def cgroup_cpus(proc: Path, root: Path) -> int | None:
    """The cores the cgroup's CPU quota allows, rounded up (``None``: no quota found)."""
    v2, v1 = _cgroup_dirs(proc, root)
    found = []
    for folder in v2:
        quota, _, period = (_read(folder / "cpu.max") or "").partition(" ")
        if _int(quota) and _int(period):
            found.append(math.ceil(int(quota) / int(period)))
    for folder in v1:
        quota, period = _read(folder / "cpu.cfs_quota_us"), _int(_read(folder / "cpu.cfs_period_us"))
        if quota and quota.isdigit() and int(quota) > 0 and period:
            found.append(math.ceil(int(quota) / period))
    return min(found) if found else None


def available_mib(proc: Path, root: Path) -> int | None:
    """``min(MemAvailable, the cgroup's room)`` in MiB (``None``: neither can be read)."""
    found = []
    for line in (_read(proc / "meminfo") or "").splitlines():
        if line.startswith("MemAvailable:") and len(line.split()) >= 2 and line.split()[1].isdigit():
            found.append(int(line.split()[1]) // 1024)
    cgroup = cgroup_memory_mib(proc, root)
    if cgroup is not None:
        found.append(cgroup)
    return min(found) if found else None


def workers(mib_per_worker: int = 4096, *, proc: str | Path = "/proc", cgroup_root: str | Path = "/sys/fs/cgroup",
            cores: int | None = None) -> int:
    """The module docstring's number."""
    proc, root = Path(proc), Path(cgroup_root)
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    bounds = [cores, MAX_WORKERS]
    quota = cgroup_cpus(proc, root)
    if quota is not None:
        bounds.append(quota)
    memory = available_mib(proc, root)
    if memory is not None:
        bounds.append(memory // max(1, mib_per_worker))
    return max(1, min(bounds))


if __name__ == "__main__":
    print(workers(int(sys.argv[1]) if len(sys.argv) > 1 else 4096))
