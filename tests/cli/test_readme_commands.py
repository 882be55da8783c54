"""The README's commands work as written after ``make demo``: the ``steadyrl`` command lives in
``.venv``, so the README activates it before the first bare ``steadyrl``; and no install line
pulls the CUDA build of torch on a CPU machine (torch is installed first, from the CPU index)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _shell_lines() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readme_activates_the_venv_before_its_first_steadyrl_command():
    lines = _shell_lines()
    first = next(i for i, line in enumerate(lines) if line.startswith("steadyrl "))
    assert any(line.startswith("source .venv/bin/activate") for line in lines[:first]), lines[: first + 1]


def test_the_readme_installs_a_cpu_torch_before_steadyrl():
    lines = _shell_lines()
    installs = [i for i, line in enumerate(lines) if line.startswith("pip install -e")]
    assert installs
    for i in installs:
        assert any(line.startswith("pip install torch") and "download.pytorch.org/whl/cpu" in line
                   for line in lines[:i]), lines[: i + 1]
