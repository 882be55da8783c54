"""``make test``'s worker count (``TEST_WORKERS=auto``, ``tools/xdist_workers.py``): a container's
cgroup limits count. At d175cfe the Makefile read ``nproc`` and ``/proc/meminfo`` alone, which show
the host's: a container limited to 6 GiB on a 64 GiB, 8-core host started 4 workers of up to 4 GiB."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("xdist_workers", REPO / "tools" / "xdist_workers.py")
xdist_workers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(xdist_workers)
GIB = 1 << 30


def machine(tmp_path, *, available_gib=64, cgroup_line="0::/", files=None) -> dict:
    """A fake ``/proc`` (meminfo, self/cgroup) and ``/sys/fs/cgroup`` (``files``: path -> text), in a
    folder of its own under ``tmp_path``."""
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    root.mkdir()
    if available_gib is not None:
        (proc / "meminfo").write_text(f"MemTotal: {128 << 20} kB\nMemAvailable: {available_gib << 20} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return {"proc": proc, "cgroup_root": root}


def test_a_host_without_limits_gets_a_worker_per_core_at_most_4(tmp_path):
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path)) == 4
    assert xdist_workers.workers(4096, cores=2, **machine(tmp_path)) == 2
    assert xdist_workers.workers(4096, cores=1, **machine(tmp_path)) == 1


def test_available_memory_bounds_the_workers(tmp_path):
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path, available_gib=9)) == 2
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path, available_gib=3)) == 1


def test_a_cgroup_v2_memory_limit_bounds_the_workers(tmp_path):
    """The container's own cgroup (named by /proc/self/cgroup), not the host's free memory."""
    files = {"box/memory.max": str(6 * GIB), "box/memory.current": str(1 * GIB)}
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path, cgroup_line="0::/box", files=files)) == 1
    files = {"memory.max": str(13 * GIB), "memory.current": str(1 * GIB)}  # a cgroup namespace: its root
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path, files=files)) == 3
    files = {"memory.max": "max", "memory.current": str(1 * GIB)}
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path, files=files)) == 4


def test_a_cgroup_v1_memory_limit_bounds_the_workers_and_its_no_limit_does_not(tmp_path):
    files = {"memory/box/memory.limit_in_bytes": str(9 * GIB), "memory/box/memory.usage_in_bytes": "0"}
    one = machine(tmp_path, cgroup_line="4:memory:/box", files=files)
    assert xdist_workers.workers(4096, cores=8, **one) == 2
    files = {"memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": str(GIB)}
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path, files=files)) == 4


def test_a_cgroup_cpu_quota_bounds_the_workers(tmp_path):
    files = {"cpu.max": "150000 100000"}  # 1.5 cores: 2
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path, files=files)) == 2
    files = {"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "100000"}
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path, files=files)) == 1
    files = {"cpu.max": "max 100000", "cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}
    assert xdist_workers.workers(4096, cores=8, **machine(tmp_path, files=files)) == 4


def test_nothing_readable_leaves_the_cores(tmp_path):
    """No /proc/meminfo, no cgroup files, a /proc/self/cgroup line of nonsense."""
    assert xdist_workers.workers(4096, cores=3, **machine(tmp_path, available_gib=None, cgroup_line="junk")) == 3


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("python3") is None, reason="make, python3")
def test_make_test_starts_the_number_the_tool_prints(tmp_path):
    """``make -n test``'s pytest line: ``-n N`` with the tool's number on this machine, none where it
    is 1; ``TEST_WORKERS=0`` and ``1`` are serial, ``TEST_WORKERS=3`` is 3 workers."""
    def pytest_line(*settings: str) -> str:
        out = subprocess.run(["make", "-n", "-C", str(REPO), "test", f"VENV={tmp_path / 'venv'}", *settings],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return next(line for line in out.stdout.splitlines() if " -m pytest" in line)

    expected = int(subprocess.run(["python3", str(REPO / "tools" / "xdist_workers.py"), "4096"], capture_output=True,
                                  text=True, timeout=60).stdout)
    workers = re.search(r" -n (\d+) ", pytest_line())
    assert (int(workers.group(1)) if workers else 1) == expected
    assert " -n " not in pytest_line("TEST_WORKERS=0") and " -n " not in pytest_line("TEST_WORKERS=1")
    assert " -n 3 " in pytest_line("TEST_WORKERS=3")
