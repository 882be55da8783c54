"""The ``watch`` fixture of the sandbox tests: processes started inside a sandbox note themselves
in a folder (``watch.note()``: one file per pid, holding the sandbox's tag), and
``watch.survivors()`` says from ``/proc`` which of them - or which process carrying one of their
tags - is still alive. Whatever a test leaves behind is SIGKILLed at its end."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from steadyrl.sandbox import TAG_VAR


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


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
        """Called inside a sandbox: record this process (its pid and the sandbox's tag)."""
        Path(self.folder, str(os.getpid())).write_text(os.environ.get(TAG_VAR, ""))

    def noted(self, at_least: int = 1, within_s: float = 3.0) -> dict[int, str]:
        """``pid -> tag`` of the noted processes, once there are ``at_least`` of them."""
        deadline = time.monotonic() + within_s
        while len(list(self.folder.iterdir())) < at_least and time.monotonic() < deadline:
            time.sleep(0.02)
        return {int(p.name): p.read_text() for p in self.folder.iterdir()}

    def survivors(self, within_s: float = 3.0) -> list[int]:
        """The noted processes (and any carrying their tags) still alive after up to ``within_s``."""
        noted = self.noted(at_least=0)
        tags = {t for t in noted.values() if t}
        deadline = time.monotonic() + within_s
        while True:
            alive = sorted({p for p in noted if _alive(p)} | set(_tagged(tags)))
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
        try:
            os.kill(int(p.name), 9)
        except OSError:
            pass
