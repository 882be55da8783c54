"""The ``watch`` fixture of the sandbox tests: processes started inside a sandbox note themselves
in a folder (``watch.note()``: one file per process, holding the sandbox's tag), and
``watch.survivors()`` says from ``/proc`` which of them - or which process carrying one of their
tags - is still alive. Whatever a test leaves behind is SIGKILLed at its end.

A sandbox has a pid namespace of its own: a process there knows only its pid in it, so it notes
``<pid>@<namespace>`` (:data:`NOTE_SOURCE`, for code that cannot import this file) and, for those,
"alive" means "some process of the machine is still in that namespace" (the namespace ends with
its last process)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from steadyrl.sandbox import TAG_VAR

NOTE_SOURCE = """
def note(folder):
    import os, pathlib
    ns = os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
    pathlib.Path(folder, f"{os.getpid()}@{ns}").write_text(os.environ.get("STEADYRL_SANDBOX", ""))
"""
"""``note(folder)``: what ``watch.note()`` does, as source for a file or a ``python -c`` program."""
exec(NOTE_SOURCE)
HOST_NS = os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]") if sys.platform.startswith("linux") else ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _in_namespace(ns: str) -> list[int]:
    """The processes of the machine in the pid namespace ``ns`` (an inode number)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid").split("[")[-1].rstrip("]") == ns and _alive(int(name)):
                    found.append(int(name))
            except OSError:
                continue
    return found


def _tagged(tags: set[str]) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    env = f.read()
            except OSError:
                continue
            if any(f"{TAG_VAR}={t}\0".encode() in env for t in tags):
                found.append(int(name))
    return found


class Watch:
    def __init__(self, folder: Path):
        self.folder = folder

    def note(self) -> None:
        """Called inside a sandbox: record this process (its pid, its pid namespace, the sandbox's tag)."""
        note(self.folder)  # noqa: F821 - defined by exec(NOTE_SOURCE)

    def noted(self, at_least: int = 1, within_s: float = 30.0) -> dict[str, str]:
        """``pid[@namespace] -> tag`` of the noted processes, once there are ``at_least`` of them."""
        deadline = time.monotonic() + within_s
        while len(list(self.folder.iterdir())) < at_least and time.monotonic() < deadline:
            time.sleep(0.02)
        return {p.name: p.read_text() for p in self.folder.iterdir()}

    def _alive(self, name: str) -> list[int]:
        pid, _, ns = name.partition("@")
        if ns and ns != HOST_NS:
            return _in_namespace(ns)
        return [int(pid)] if _alive(int(pid)) else []

    def survivors(self, within_s: float = 30.0) -> list[int]:
        """The noted processes (and any carrying their tags, or in their pid namespaces) still
        alive after up to ``within_s``."""
        noted = self.noted(at_least=0)
        tags = {t for t in noted.values() if t}
        deadline = time.monotonic() + within_s
        while True:
            alive = sorted({p for name in noted for p in self._alive(name)} | set(_tagged(tags)))
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.05)


@pytest.fixture
def watch(tmp_path):
    if not sys.platform.startswith("linux"):
        pytest.skip("needs fork and /proc")
    folder = tmp_path / "pids"
    folder.mkdir()
    yield Watch(folder)
    for p in folder.iterdir():
        pid, _, ns = p.name.partition("@")
        for victim in (_in_namespace(ns) if ns and ns != HOST_NS else [int(pid)]):
            try:
                os.kill(victim, 9)
            except OSError:
                pass
