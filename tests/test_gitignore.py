"""What the README's commands write into the checkout (prepared data, downloads, converted models,
runs) is ignored by git, and only at the root: ``/data/`` must not hide the ``steadyrl/data/`` package."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ignored(path: str) -> bool:
    done = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", path], check=False)
    return done.returncode == 0


def _written_by_the_readme() -> set[str]:
    """Top folders of the outputs the README's commands name: prepare scripts' and convert's targets,
    pip download's -d, --output-dir."""
    text = (ROOT / "README.md").read_text()
    outs = re.findall(r"python examples/prepare_\w+\.py (\S+)", text)
    outs += re.findall(r"-d (\S+)", text) + re.findall(r"--output-dir (\S+)", text)
    outs += re.findall(r"steadyrl convert \S+ (\S+)", text)
    return {o.split("/")[0] for o in outs if not o.startswith(("/", "$", "-"))}


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_readmes_outputs_are_ignored_at_the_root_only():
    tops = _written_by_the_readme()
    assert {"data", "downloads", "models", "runs"} <= tops
    assert [t for t in sorted(tops) if not _ignored(f"{t}/x")] == []
    assert not _ignored("steadyrl/data/prompts.py") and not _ignored("steadyrl/models.py")
