"""Third-party scorers run contained: a package's scoring function that may run the answer (``eval``,
sympy's ``parse_expr``, ``exec``) scores each sample in a fresh, contained process.

The rule (docs/rewards.md, "Third-party scorers"): a scorer steadyrl did not write, fed model-written
text, never runs in the trainer nor in a worker that scores the next sample. :func:`score_contained`
runs ``source`` (a short script of steadyrl's own that imports the package and calls its scorer)
once per sample through the ``code`` reward's machinery (:func:`steadyrl.sandbox.programs.run_program`,
``stdio`` mode): bubblewrap's view where it works (else the namespaces), ``nobody`` when run as root,
no network, every file read-only but a private tmpfs, no secrets in the environment, the limits
below. The package is imported once per batch by the harness (``preload``) and every sample is a
fresh ``fork`` of it, killed with all it started when its score is out: nothing a sample does (a
patched function, a file, a thread) reaches the next.

The script reads one JSON line (the sample's input) on stdin and gives its score with
``verdict(score)``: one JSON line ``{"score": float}`` on a pipe of its own (the harness's
``verdict`` option, fd 3), never on stdout, which is not read at all. Every script starts with
:mod:`.contained_verdict`, and calls its ``contain_eval()`` before the model's text reaches the
scorer: from then on each ``eval`` runs in a fork without that pipe and hands back only a value, so
no answer can write, fake or replace the score line (DESIGN.md: a sample never writes its own score).
Anything else (no verdict, an exception, a time-out, a limit) scores ``0.0`` (:data:`FAILED`,
counted by the caller).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

__all__ = ["LIMITS", "PRELUDE", "available", "score_contained"]

LIMITS = {"test_time_s": 10.0, "memory_mb": 4096, "processes": 4, "file_size_mb": 4, "open_files": 128,
          "output_bytes": 1 << 16, "network": True, "readonly_fs": True}
"""Per sample: 10 s, 4 GiB of address space (the package and sympy are mapped already), 4 processes,
no network (``network: True`` asks for a namespace of its own), a read-only file system."""
BATCH_GRACE_S = 30.0
"""The harness's time for the whole batch: ``test_time_s`` per sample plus this (the package's import)."""
FAILED = 0.0
_VIEW: dict[str, bool] = {}


def available() -> bool:
    """Whether this machine can contain a scorer (Linux with ``fork``: the sandbox's platform)."""
    import os

    return sys.platform.startswith("linux") and hasattr(os, "fork")


def _use_view(python: str) -> bool:
    """bubblewrap's view where it is installed and answers here (asked once per interpreter)."""
    if python not in _VIEW:
        from ..sandbox.programs import probe_isolation
        from ..sandbox.view import bwrap_path

        _VIEW[python] = bwrap_path() is not None and bool(
            probe_isolation(python=python, network=True, readonly_fs=True, view=True).get("view"))
    return _VIEW[python]


PRELUDE = (Path(__file__).with_name("contained_verdict.py")).read_text(encoding="utf-8")
"""The start of every scorer script: ``verdict(score)`` and ``contain_eval()`` (:mod:`.contained_verdict`)."""


def _score(result: dict) -> float | None:
    """The score the scorer sent on its verdict pipe (stdout is the sample's, never read), or
    ``None`` when it failed or sent none or more than one."""
    if result.get("status") != "ok":
        return None
    lines = (result.get("verdict") or "").strip().splitlines()
    try:
        value = json.loads(lines[0])["score"] if len(lines) == 1 else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    except (ValueError, KeyError, TypeError):
        return None


def score_contained(source: str, preload: tuple[str, ...], inputs: list[dict], *,
                    run: Callable | None = None) -> tuple[list[float], int]:
    """``(scores, failed)``: each of ``inputs`` scored by ``source`` (after :data:`PRELUDE`) in a
    fresh contained process (module docstring); ``failed`` counts the samples that scored :data:`FAILED` for failing.
    Raises ``RuntimeError`` when the sandbox itself could not start."""
    if not inputs:
        return [], 0
    from ..sandbox.programs import run_program

    run = run or run_program
    python = sys.executable
    job = {**LIMITS, "source": PRELUDE + "\n" + source, "mode": "stdio", "setup": "", "preload": list(preload),
           "verdict": True,
           "cases": [json.dumps(x) + "\n" for x in inputs],
           "sample_time_s": LIMITS["test_time_s"] * len(inputs) + BATCH_GRACE_S}
    reply = run(job, python=python, view=_use_view(python))
    results = reply.get("results") or []
    if reply.get("error") or len(results) != len(inputs):
        raise RuntimeError(f"the contained scorer could not run: {reply.get('error') or 'no results'}")
    scores = [_score(r) for r in results]
    return [FAILED if s is None else s for s in scores], sum(s is None for s in scores)
