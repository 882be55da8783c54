"""The ``code`` sandbox runs ordinary correct programs (issue 30, item 13), in every mode this machine
has (bubblewrap's view where installed, the namespaces), with the trainer's interpreter and, as
root, the system one (programs then run as ``nobody`` outside the view too): the standard library
imports as ``nobody`` in the view (bubblewrap made the interpreter's parent folders ``0700``), a
thread started and never joined finishes its work (the program ends as the interpreter would, not
with ``os._exit``), threads do not count as processes, ``multiprocessing``'s locks, queues and pools
work (a private writable ``/dev/shm``), and bubblewrap is found on ``PATH``."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

if not sys.platform.startswith("linux"):
    pytest.skip("the local sandbox is Linux only", allow_module_level=True)

from steadyrl.sandbox import view  # noqa: E402
from steadyrl.sandbox.programs import run_program  # noqa: E402

PYTHONS = [sys.executable] + (["/usr/bin/python3"] if os.getuid() == 0 and os.path.exists("/usr/bin/python3") else [])
VIEWS = [False] + ([True] if view.bwrap_path() else [])
JOB = {"mode": "stdio", "cases": [""], "setup": "", "test_time_s": 20.0, "sample_time_s": 40.0, "memory_mb": 1024,
       "processes": 4, "file_size_mb": 8, "open_files": 64, "output_bytes": 1 << 16, "network": True,
       "readonly_fs": True}


def run(source: str, python: str, in_view: bool) -> dict:
    reply = run_program({**JOB, "source": source}, python=python, view=in_view)
    assert reply.get("results"), reply
    return reply["results"][0]


@pytest.fixture(params=[(p, v) for p in PYTHONS for v in VIEWS],
                ids=lambda s: f"{'trainer' if s[0] == sys.executable else s[0]}-{'view' if s[1] else 'namespaces'}")
def mode(request):
    return request.param


def test_the_standard_library_imports_in_every_mode(mode):
    names = ["threading", "queue", "hashlib", "asyncio", "socket", "contextvars", "sqlite3", "decimal", "json"]
    source = f"import {', '.join(names)}\nprint(hashlib.sha256(b'x').hexdigest()[:8])"
    result = run(source, *mode)
    assert result["status"] == "ok" and result["stdout"] == "2d711642\n", result


def test_a_thread_never_joined_finishes_its_work(mode):
    source = ("import sys, threading\nsys.setrecursionlimit(1 << 20)\nthreading.stack_size(2 ** 26)\n"
              "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
              "threading.Thread(target=lambda: print(depth(100000))).start()")
    result = run(source, *mode)
    assert result["status"] == "ok" and result["stdout"] == "100000\n", result


def test_atexit_functions_run(mode):
    result = run("import atexit\natexit.register(print, 'bye')\nprint('hi')", *mode)
    assert result["stdout"] == "hi\nbye\n", result


def test_threads_do_not_count_as_processes(mode):
    source = ("import threading\nts = [threading.Thread(target=lambda: None) for _ in range(16)]\n"
              "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(len(ts))")
    result = run(source, *mode)  # processes: 4
    assert result["status"] == "ok" and result["stdout"] == "16\n", result


def test_multiprocessing_locks_queues_and_pools_work(mode):
    source = ("import multiprocessing as mp\nlock = mp.Lock()\nq = mp.Queue()\nq.put(3)\n"
              "with lock:\n    print(q.get())\nwith mp.Pool(2) as pool:\n    print(pool.map(abs, [-1, -2]))")
    result = run(source, *mode)
    assert result["status"] == "ok" and result["stdout"] == "3\n[1, 2]\n", result


def test_numpy_imports_where_it_is_installed():
    pytest.importorskip("numpy")
    for in_view in VIEWS:
        result = run("import numpy\nprint(int(numpy.arange(5).sum()))", sys.executable, in_view)
        assert result["status"] == "ok" and result["stdout"] == "10\n", result


def test_the_view_makes_the_interpreters_parent_folders_traversable():
    if not view.bwrap_path():
        pytest.skip("bubblewrap is not installed")
    args = view.view_command(sys.executable, tmp_bytes=1 << 20, network=True)
    made = {args[i + 3]: args[i + 1] for i in range(len(args) - 3) if args[i] == "--perms" and args[i + 2] == "--dir"}
    for prefix in view.interpreter_prefixes(sys.executable):
        parent = os.path.dirname(prefix)
        while parent not in ("/", "/usr", "/tmp") and not parent.startswith("/usr/"):
            assert made.get(parent) == "0755", (parent, made)
            parent = os.path.dirname(parent)


def test_bubblewrap_is_found_on_path(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    assert view.bwrap_path() == str(fake)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert view.bwrap_path() == shutil.which("bwrap", path=view.BWRAP_DIRS)
