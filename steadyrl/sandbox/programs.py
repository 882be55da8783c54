"""Running one untrusted program against its test cases in a fresh, contained process.

``run_program(job, python=..., view=..., cgroup=...)`` starts ``python -I harness.py`` (a fresh
interpreter that imports nothing of the trainer) - with ``view``, inside bubblewrap's file-system
view (:mod:`.view`); with ``cgroup``, in a cgroup of the sample's own (:mod:`.cgroups`), joined by a
``sh`` before bwrap starts - in a new session, with an environment of ``PATH``, ``LANG`` and a tag
only, sends it the job as JSON and reads its JSON reply with a deadline (the job's
``sample_time_s`` plus a grace). What the harness does to contain the program - a child per test in
its own process group, ``nobody`` when run as root, namespaces, resource limits - is in
:mod:`steadyrl.sandbox.harness`.

Whatever happens, when ``run_program`` returns nothing it started is alive: the harness's session,
every process below it, every process carrying its tag and every process of its cgroup are killed,
and the cgroup and the directory removed. A harness that dies (a program that killed its parent),
sends no or a broken reply, or runs past the deadline gives ``{"error": reason, "results": []}``;
a sample whose cgroup ran out of memory fails every test with ``memory``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import cgroups, procs
from .view import view_command

__all__ = ["HARNESS", "run_program", "probe_isolation", "MINIMAL_PATH", "CODE_TAG_VAR", "TAG_PREFIX_VAR"]

HARNESS = str(Path(__file__).with_name("harness.py"))
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
CODE_TAG_VAR = procs.CODE_TAG_VAR
TAG_PREFIX_VAR = "STEADYRL_CODE_TAG_PREFIX"
"""Set in the caller's environment (letters and digits, at most 32), it starts every sample's tag:
one run's (or one test's) programs can then be told from another's in ``/proc``."""
GRACE_S = 2.0
MAX_REPLY_BYTES = 64 * 1024 * 1024
HARNESS_MEMORY_MB = 64
"""Added to ``memory_mb`` in a sample's cgroup: the harness, bwrap and the reaper."""
THREADS = 32
"""Threads a sample may start beyond its ``processes`` (the kernel counts threads against
``RLIMIT_NPROC`` and a cgroup's ``pids.max``; the harness counts processes alone against
``processes``). Numerical libraries are told to start one thread (:data:`ONE_THREAD`)."""
ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "RAYON_NUM_THREADS")
"""Set to ``1`` in a program's environment: a sample gets one core's worth of threads, whatever the machine."""
HARNESS_PROCESSES = 6
"""Added to ``processes`` in a sample's cgroup: bwrap (two), the harness, its reaper, a shell."""
VIEW_WORKDIR = "/tmp/work"
_JOIN_CGROUP = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
"""``sh -c`` that moves itself into the sample's cgroup (as the caller, before bwrap drops rights)."""


def _new_tag(extra: str = "") -> str:
    """A sample's tag: :data:`TAG_PREFIX_VAR`'s value (when it is letters and digits) and a random part."""
    prefix = os.environ.get(TAG_PREFIX_VAR, "")
    prefix = prefix if prefix.isalnum() and len(prefix) <= 32 else ""
    return prefix + extra + secrets.token_hex(8)


def _environment(tag: str) -> dict[str, str]:
    return {"PATH": MINIMAL_PATH, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", CODE_TAG_VAR: tag,
            "HOME": "/nonexistent", **{name: "1" for name in ONE_THREAD}}


def _tmp_bytes(job: dict) -> int:
    """The view's tmpfs: ``file_size_mb`` for the program, plus the tests' inputs and a little slack."""
    inputs = sum(len(c.encode()) for c in job["cases"]) if job["mode"] == "stdio" else 0
    return job["file_size_mb"] * 1024 * 1024 + inputs + (1 << 20)


def _command(job: dict, python: str, view: bool, group) -> list[str]:
    if view:
        command = view_command(python, tmp_bytes=_tmp_bytes(job), network=job["network"])
    else:
        command = [python, "-I", HARNESS]
    if group is not None:
        command = ["/bin/sh", "-c", _JOIN_CGROUP, "sh", str(len(group.procs_files)), *group.procs_files, *command]
    return command


def _cgroup(job: dict, tag: str, cgroup: bool):
    if not cgroup:
        return None
    return cgroups.create(f"{cgroups.PREFIX}{tag}", memory_bytes=(job["memory_mb"] + job["file_size_mb"] + HARNESS_MEMORY_MB) << 20,
                          pids=job["processes"] + job["threads"] + HARNESS_PROCESSES)


def run_program(job: dict, *, python: str = sys.executable, view: bool = False, cgroup: bool = False) -> dict:
    """Run ``job`` (see :mod:`.harness`; ``workdir`` is filled in here) and return the harness's
    reply, ``{"results": [...]}``, or ``{"error": why, "results": []}``. ``view``: in bubblewrap's
    file-system view (:mod:`.view`); ``cgroup``: in a cgroup of its own (:mod:`.cgroups`), where
    one can be made."""
    base = tempfile.mkdtemp(prefix="steadyrl-code-")
    workdir = VIEW_WORKDIR if view else os.path.join(base, "work")
    if not view:
        os.mkdir(workdir)
    tag = _new_tag()
    job = {"threads": THREADS, **job, "workdir": workdir, "view": view}
    proc, clean, group = None, False, None
    try:
        group = _cgroup(job, tag, cgroup)
        proc = subprocess.Popen(_command(job, python, view, group), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=base, env=_environment(tag), start_new_session=True,
                                close_fds=True)
        reply, clean = _answer(proc, job)
        if group is not None and group.oom_killed():  # the kernel killed for the sample's memory
            reply = _out_of_memory(reply)
        return reply
    except OSError as err:
        return {"error": f"cannot start {python!r}: {err}", "results": []}
    finally:
        if proc is not None:
            if not clean:
                # the harness's session, all below it, and every process carrying its tag (one that
                # left the session and whose harness was killed first)
                procs.kill_all(proc.pid, tag, tag_var=CODE_TAG_VAR)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if group is not None:
            group.remove()
        shutil.rmtree(base, ignore_errors=True)


def _answer(proc: subprocess.Popen, job: dict) -> tuple[dict, bool]:
    """The harness's reply, and whether it came (then the harness killed all below it)."""
    try:
        out, err = proc.communicate(json.dumps(job).encode(), timeout=job["sample_time_s"] + GRACE_S)
    except subprocess.TimeoutExpired:
        return {"error": "timeout", "results": []}, False
    if proc.returncode != 0:
        why = "killed" if proc.returncode < 0 else f"exit status {proc.returncode}"
        return {"error": f"the harness died ({why}): {err.decode('utf-8', 'replace')[-300:]}", "results": []}, False
    if len(out) > MAX_REPLY_BYTES:
        return {"error": "the harness's reply is too large", "results": []}, False
    try:
        reply = json.loads(out)
    except ValueError:
        return {"error": "the harness sent a broken reply", "results": []}, False
    if not isinstance(reply, dict):
        return {"error": "the harness sent a broken reply", "results": []}, False
    return reply, True


def _out_of_memory(reply: dict) -> dict:
    """A sample whose cgroup ran out of memory (the kernel killed one of its processes): it went
    over its one memory budget, so every test it ran fails for ``memory``."""
    results = reply.get("results") or []
    if not results:
        return {"error": "memory", "results": []}
    return {**reply, "results": [{"status": "memory", "error": "the sample's processes together ran out of memory"}
                                 for _ in results]}


def probe_isolation(*, python: str = sys.executable, network: bool = True, readonly_fs: bool = True,
                    view: bool = False) -> dict:
    """What a program would get here: ``{"network": bool, "readonly_fs": bool, "pid": bool,
    "ipc": bool, "user": "nobody" | "same" | "unknown", "view": bool}`` (``network``: a network
    namespace of its own; ``user``: ``"nobody"`` when run as root; ``view``: in bwrap's view,
    which answered)."""
    base = tempfile.mkdtemp(prefix="steadyrl-code-")
    workdir = VIEW_WORKDIR if view else os.path.join(base, "work")
    if not view:
        os.mkdir(workdir)
    job = {"probe": True, "workdir": workdir, "network": network, "readonly_fs": readonly_fs, "view": view,
           "mode": "calls", "cases": [], "file_size_mb": 1}
    tag, proc, reply = _new_tag("probe-"), None, None
    try:
        proc = subprocess.Popen(_command(job, python, view, None), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=base, env=_environment(tag),
                                start_new_session=True, close_fds=True)
        out, _ = proc.communicate(json.dumps(job).encode(), timeout=30)
        reply = json.loads(out)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        reply = None
    finally:
        if proc is not None:  # the probe too leaves nothing running
            procs.kill_all(proc.pid, tag, tag_var=CODE_TAG_VAR)
            proc.wait()
        shutil.rmtree(base, ignore_errors=True)
    if not isinstance(reply, dict):
        return {"network": False, "readonly_fs": False, "pid": False, "ipc": False, "user": "unknown", "view": False}
    return {**reply, "view": view}
