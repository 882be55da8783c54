"""Helpers of the data-parallel tests: ``torchrun`` in a subprocess (gloo on the CPU), and the
shared fixed batch of ``dp_common.py`` (importable by the tests and their workers)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list[str], *, nproc: int = 2, timeout: float = 120, cwd: Path | None = None):
    """``torchrun --nproc_per_node nproc ARGS`` on a free local port; the CompletedProcess."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd or REPO)


@pytest.fixture
def run_torchrun():
    return torchrun
