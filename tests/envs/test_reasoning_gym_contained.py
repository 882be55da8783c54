"""The ``reasoning_gym`` reward scores every answer in a fresh contained process: an answer that the
task's scorer evaluates as Python (countdown's ``parse_expr``, n_queens' ``eval``) writes no host
file, reads no secret, and cannot patch the scorer for the samples after it; correct answers still
score 1.0. The attacks are sent past the reward's lexical guard too (straight to the contained
scorer), so each test shows the containment itself, not the guard."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

rg = pytest.importorskip("reasoning_gym", reason="pip install 'steadyrl[reasoning-gym]'")
if not sys.platform.startswith("linux"):
    pytest.skip("the contained scorer needs Linux", allow_module_level=True)

from steadyrl.data import load_records  # noqa: E402
from steadyrl.rewards import load_reward  # noqa: E402
from steadyrl.rewards.contained import score_contained  # noqa: E402
from steadyrl.rewards.reasoning_gym import RUNS_ANSWER, SCORER, looks_like_code  # noqa: E402


def _entries(spec):
    return [r["reasoning_gym"] for r in load_records(spec)]


def _contained(answers, entries):
    """The contained scorer on raw answers (no lexical guard in the way)."""
    return score_contained(SCORER, ("reasoning_gym",), [{"answer": a, "entry": e} for a, e in zip(answers, entries)])


@pytest.fixture
def target(tmp_path):
    os.chmod(tmp_path, 0o777)  # writable even to nobody: only the sandbox keeps the answer out
    return tmp_path / f"pwned-{uuid.uuid4().hex}"


def test_every_task_that_evaluates_its_answer_scores_its_own_answer_one():
    entries = [e for task in sorted(RUNS_ANSWER) for e in _entries(f"reasoning_gym:{task}?size=2&test_size=1")]
    fn = load_reward("reasoning_gym")
    scores = fn([""] * len(entries), [f"<answer>{e['answer']}</answer>" for e in entries], reasoning_gym=entries)
    assert [e["task"] for e, s in zip(entries, scores) if s != 1.0] == []


def test_correct_answers_score_one_and_wrong_answers_below_for_countdown_and_basic_arithmetic():
    entries = _entries("reasoning_gym:countdown?size=3&test_size=1") + _entries(
        "reasoning_gym:basic_arithmetic?size=3&test_size=1")
    fn = load_reward("reasoning_gym")
    right = fn([""] * 6, [f"<answer>{e['answer']}</answer>" for e in entries], reasoning_gym=entries)
    wrong = fn([""] * 6, ["<answer>12345678</answer>"] * 6, reasoning_gym=entries)
    assert right == [1.0] * 6 and max(wrong) < 1.0


def test_an_answer_that_runs_a_shell_command_writes_no_host_file(target):
    entry = _entries("reasoning_gym:countdown?size=1&test_size=1")[0]
    attack = f"__import__('os').system('id > {target}')"
    scores, _ = _contained([attack, f"open('{target}', 'w').write('x')"], [entry, entry])
    assert not target.exists() and max(scores) < 1.0


def test_an_answer_evaluated_by_eval_writes_no_host_file(target):
    entry = _entries("reasoning_gym:n_queens?size=1&test_size=1")[0]
    scores, _ = _contained([f"[open('{target}', 'w').write('x')]"], [entry])
    assert not target.exists() and scores[0] < 1.0


def test_an_answer_cannot_patch_the_scorer_for_the_samples_after_it():
    entries = _entries("reasoning_gym:countdown?size=3&test_size=1")
    # in one process this patch makes every later countdown answer score 1.0
    patch = 'exec("import reasoning_gym.games.countdown as c\\nc.CountdownDataset.score_answer = lambda *a: 1.0")'
    scores, _ = _contained([patch, "1", "2"], entries)
    assert max(scores[1:]) < 1.0


def test_an_answer_reads_no_secret_of_the_trainer(monkeypatch):
    monkeypatch.setenv("STEADYRL_TEST_SECRET_TOKEN", "s3cr3t")
    entry = _entries("reasoning_gym:spiral_matrix?size=1&test_size=1")[0]
    right = [int(x) for x in entry["answer"].split()]
    # spiral_matrix gives 0.1 to the right answer written as a list: the list only when the variable reads so
    probe = "{right} if __import__('os').environ.get('{name}') == '{value}' else []"
    scores, _ = _contained([probe.format(right=right, name="STEADYRL_TEST_SECRET_TOKEN", value="s3cr3t"),
                            probe.format(right=right, name="LANG", value="C.UTF-8")], [entry, entry])
    assert scores == [0.0, 0.1]  # the control: the sandbox's own LANG is read, the trainer's secret is not


def test_an_answer_that_reads_as_python_scores_zero_before_it_is_scored():
    assert looks_like_code("countdown", "__import__('os')")
    assert looks_like_code("puzzle24", "exec(chr(49))")
    assert not looks_like_code("countdown", "(100 - 4) * 3 + 7")
    assert not looks_like_code("basic_arithmetic", "exec")  # a task that does not evaluate its answer
    assert not looks_like_code("n_queens", "_ Q _ _\n_ _ _ Q\nQ _ _ _\n_ _ Q _")  # its boards use underscores
    entry = _entries("reasoning_gym:countdown?size=1&test_size=1")[0]
    fn = load_reward("reasoning_gym")
    assert fn([""], ["<answer>exec(chr(49))</answer>"], reasoning_gym=[entry]) == [0.0]


def test_the_tasks_that_evaluate_their_answer_are_the_ones_named_in_the_docs():
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "environments.md")) as f:
        docs = f.read()
    assert all(f"`{task}`" in docs for task in RUNS_ANSWER)
