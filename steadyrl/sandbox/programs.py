"""Running one untrusted program against its test cases in a fresh, contained process.

``run_program(job, python=...)`` starts ``python -I steadyrl/sandbox/harness.py`` (a fresh
interpreter that imports nothing of the trainer) in a new session, in a fresh temporary directory,
with an environment of ``PATH``, ``LANG`` and a tag only, sends it the job as JSON and reads its
JSON reply with a deadline (the job's ``sample_time_s`` plus a grace). What the harness does to
contain the program - a child per test in its own process group, ``nobody`` when run as root,
network / mount namespaces, resource limits - is in :mod:`steadyrl.sandbox.harness`.

Whatever happens, when ``run_program`` returns nothing it started is alive: the harness's session,
every process below it and every process carrying its tag are killed, and the directory removed.
A harness that dies (a program that killed its parent), sends no or a broken reply, or runs past
the deadline gives ``{"error": reason, "results": []}``.
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

from . import procs

__all__ = ["HARNESS", "run_program", "probe_isolation", "MINIMAL_PATH", "CODE_TAG_VAR"]

HARNESS = str(Path(__file__).with_name("harness.py"))
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
CODE_TAG_VAR = procs.CODE_TAG_VAR
GRACE_S = 2.0
MAX_REPLY_BYTES = 64 * 1024 * 1024


def _environment(tag: str) -> dict[str, str]:
    return {"PATH": MINIMAL_PATH, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", CODE_TAG_VAR: tag,
            "HOME": "/nonexistent"}


def _start(job: dict, python: str, workdir: str, tag: str) -> subprocess.Popen:
    return subprocess.Popen([python, "-I", HARNESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=os.path.dirname(workdir), env=_environment(tag),
                            start_new_session=True, close_fds=True)


def run_program(job: dict, *, python: str = sys.executable) -> dict:
    """Run ``job`` (see :mod:`.harness`; ``workdir`` is filled in here) and return the harness's
    reply, ``{"results": [...]}``, or ``{"error": why, "results": []}``."""
    base = tempfile.mkdtemp(prefix="steadyrl-code-")
    workdir = os.path.join(base, "work")
    os.mkdir(workdir)
    tag = secrets.token_hex(8)
    proc, clean = None, False
    try:
        proc = _start({**job, "workdir": workdir}, python, workdir, tag)
        try:
            out, err = proc.communicate(json.dumps({**job, "workdir": workdir}).encode(),
                                        timeout=job["sample_time_s"] + GRACE_S)
        except subprocess.TimeoutExpired:
            return {"error": "timeout", "results": []}
        if proc.returncode != 0:
            why = "killed" if proc.returncode < 0 else f"exit status {proc.returncode}"
            return {"error": f"the harness died ({why}): {err.decode('utf-8', 'replace')[-300:]}", "results": []}
        if len(out) > MAX_REPLY_BYTES:
            return {"error": "the harness's reply is too large", "results": []}
        try:
            reply = json.loads(out)
        except ValueError:
            return {"error": "the harness sent a broken reply", "results": []}
        clean = isinstance(reply, dict)  # the harness killed all below it before answering
        return reply if clean else {"error": "the harness sent a broken reply", "results": []}
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
        shutil.rmtree(base, ignore_errors=True)


def probe_isolation(*, python: str = sys.executable, network: bool = True, readonly_fs: bool = True) -> dict:
    """What a program would get here: ``{"network": bool, "readonly_fs": bool, "user": ...}``
    (``network``: a network namespace of its own; ``user``: ``"nobody"`` when run as root)."""
    base = tempfile.mkdtemp(prefix="steadyrl-code-")
    workdir = os.path.join(base, "work")
    os.mkdir(workdir)
    job = {"probe": True, "workdir": workdir, "network": network, "readonly_fs": readonly_fs}
    tag, proc, reply = "probe-" + secrets.token_hex(8), None, None
    try:
        proc = subprocess.Popen([python, "-I", HARNESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
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
        return {"network": False, "readonly_fs": False, "pid": False, "user": "unknown"}
    return reply
