"""No test folder is skipped silently: pytest visits every ``test_*.py`` under tests/ (its default
``norecursedirs`` skips folders named ``build``, ``dist`` or ``venv``; pyproject.toml sets its own)."""

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# A plugin that records each test file pytest would collect and skips importing it, so the count
# costs a directory walk, not the import of every test module.
RECORDER = '''
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_ignore_collect(collection_path, config):
    if collection_path.is_file() and collection_path.name.startswith("test_") and collection_path.suffix == ".py":
        print("VISITED", collection_path)
        return True
    return None
'''


def test_pytest_visits_every_test_file_on_disk(tmp_path):
    (tmp_path / "visit_recorder.py").write_text(RECORDER)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-s", "--noconftest", "-p", "no:cacheprovider", "-p", "visit_recorder",
         str(TESTS)],
        capture_output=True, text=True, cwd=TESTS.parent, env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    visited = {Path(line.split(" ", 1)[1]).resolve() for line in out.stdout.splitlines() if line.startswith("VISITED ")}
    on_disk = {p.resolve() for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts}
    assert visited, out.stdout + out.stderr
    assert sorted(map(str, on_disk - visited)) == []


def test_a_test_folder_named_build_is_visited(tmp_path):
    """The case the default would skip: a folder named ``build`` (pytest's default would skip it)."""
    (tmp_path / "visit_recorder.py").write_text(RECORDER)
    suite = tmp_path / "suite"
    (suite / "build").mkdir(parents=True)
    (suite / "build" / "test_here.py").write_text("def test_one():\n    pass\n")
    (suite / "pyproject.toml").write_text((TESTS.parent / "pyproject.toml").read_text())
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-s", "--noconftest", "-p", "no:cacheprovider",
                          "-p", "visit_recorder", "."],
                         capture_output=True, text=True, cwd=suite,
                         env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert "VISITED" in out.stdout and "test_here.py" in out.stdout, out.stdout + out.stderr
