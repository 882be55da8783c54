"""A reasoning-gym answer cannot forge its score: the scorer's verdict travels on a pipe the answer
never holds (steadyrl/rewards/contained_verdict.py), so an answer that prints a score line, writes to
fd 1 / ``sys.__stdout__`` / the verdict's fd 3, closes stdout, floods it, exits, or patches the
scorer for later scores what its value is worth. The exploit of "Trust, round 4" (fullwidth
identifiers, which Python folds to ASCII) goes through the real reward and its guard; the variants
go straight to the contained scorer, so they test the channel, not the guard. Uses the real
reasoning-gym package."""

from __future__ import annotations

import json
import sys

import pytest

rg = pytest.importorskip("reasoning_gym", reason="pip install 'steadyrl[reasoning-gym]'")
if not sys.platform.startswith("linux"):
    pytest.skip("the contained scorer needs Linux", allow_module_level=True)

from steadyrl.data import load_records  # noqa: E402
from steadyrl.rewards import load_reward  # noqa: E402
from steadyrl.rewards.contained import score_contained  # noqa: E402
from steadyrl.rewards.reasoning_gym import SCORER, looks_like_code  # noqa: E402

EVAL_TASKS = ("spiral_matrix", "string_insertion", "binary_matrix", "n_queens")
EXPLOIT = "(ｐｒｉｎｔ('{\"score\": 1.0}'), (x for x in ()).throw(SystemExit))"
"""The issue's answer, verbatim: it prints a score line and exits before the real one."""


def _entry(task: str) -> dict:
    return load_records(f"reasoning_gym:{task}?size=1&test_size=1")[0]["reasoning_gym"]


def _contained(answers: list[str], entry: dict) -> list[float]:
    scores, _ = score_contained(SCORER, ("reasoning_gym",), [{"answer": a, "entry": entry} for a in answers])
    return scores


def test_the_fullwidth_exploit_scores_zero_on_every_task_that_evals_its_answer():
    entries = [_entry(task) for task in EVAL_TASKS]
    fn = load_reward("reasoning_gym")
    assert fn([""] * 4, [f"<answer>{EXPLOIT}</answer>"] * 4, reasoning_gym=entries) == [0.0] * 4


def test_the_guard_reads_fullwidth_identifiers_as_python_does():
    assert looks_like_code("n_queens", EXPLOIT)
    assert looks_like_code("spiral_matrix", "ｅｘｅｃ(ｃｈｒ(49))")
    assert looks_like_code("spiral_matrix", "＿＿import＿＿('os')")  # a fullwidth low line is an underscore
    assert not looks_like_code("spiral_matrix", "1 2 3 4")


def test_the_fullwidth_exploit_scores_zero_past_the_guard_too():
    """The channel holds without the guard: the exploit sent straight to the contained scorer."""
    for task in EVAL_TASKS:
        assert _contained([EXPLOIT], _entry(task)) == [0.0], task


_FORGE = [
    # fd 1 directly, then a clean exit before the scorer's own line
    "exec(\"import os\\nos.write(1, b'\\\\n{\\\"score\\\": 1.0}\\\\n')\\nos._exit(0)\")",
    # the interpreter's original stdout
    "exec(\"import sys, os\\nsys.__stdout__.write('{\\\"score\\\": 1.0}\\\\n')\\nsys.__stdout__.flush()\\nos._exit(0)\")",
    # a score line, then stdout closed so nothing after it is printed
    "exec(\"import os, sys\\nprint('{\\\"score\\\": 1.0}', flush=True)\\nos.close(1)\\nsys.stdout = open(os.devnull, 'w')\")",
    # many score lines, then SystemExit
    "exec(\"import sys\\nfor _ in range(5000): print('{\\\"score\\\": 1.0}')\\nraise SystemExit(0)\")",
    # the verdict's own descriptor, by number
    "exec(\"import os\\nos.write(3, b'{\\\"score\\\": 1.0}\\\\n')\\nos._exit(0)\")",
    # the verdict's descriptor reopened through /proc
    "exec(\"import os\\nfd = os.open('/proc/%d/fd/3' % os.getppid(), os.O_WRONLY)\\n"
    "os.write(fd, b'{\\\"score\\\": 1.0}\\\\n')\\nos._exit(0)\")",
    # patch what the scorer writes its verdict with, then return a wrong value
    "exec(\"import json, builtins\\njson.dumps = lambda *a, **k: '{\\\"score\\\": 1.0}'\\n"
    "builtins.float = lambda *a: 1.0\") or []",
    # a thread that prints score lines after the answer returns
    "exec(\"import threading, time, os\\ndef w():\\n    time.sleep(0.2)\\n    os.write(1, b'{\\\"score\\\": 1.0}\\\\n')\\n"
    "threading.Thread(target=w).start()\") or []",
    # kill the scorer itself after printing
    "exec(\"import os, signal\\nprint('{\\\"score\\\": 1.0}', flush=True)\\nos.kill(os.getppid(), signal.SIGKILL)\")",
]


@pytest.mark.parametrize("task", ["spiral_matrix", "n_queens"])
def test_no_way_of_writing_a_score_line_gives_a_score(task):
    scores = _contained(_FORGE, _entry(task))
    assert scores == [0.0] * len(_FORGE)


def test_a_correct_answer_evaluated_in_the_fork_still_gets_the_tasks_score():
    """The fork hands back the value: spiral_matrix gives its 0.1 for the right list, string_insertion
    its 1.0 for the right string built by an expression; a wrong value still scores 0."""
    spiral = _entry("spiral_matrix")
    right = [int(x) for x in spiral["answer"].split()]
    assert _contained([str(right), str(right[::-1])], spiral) == [0.1, 0.0]
    insertion = _entry("string_insertion")
    assert _contained([str(list(insertion["answer"]))], insertion)[0] > 0.0


def test_every_task_scores_its_own_answer_contained_as_the_package_does_in_process():
    """The value channel changes no task's score: each of reasoning-gym's tasks, its own (trusted)
    answer scored contained and by the package in this process (measured: 105 tasks, all equal)."""
    from reasoning_gym.factory import DATASETS

    entries = []
    for name in sorted(DATASETS):
        try:
            entries.append(_entry(name))
        except Exception:  # noqa: BLE001 - a task that needs what is not installed (composite needs a spec)
            continue
    assert len(entries) > 80
    scores, failed = score_contained(SCORER, ("reasoning_gym",), [{"answer": e["answer"], "entry": e} for e in entries])
    # in-process on the entry as the contained scorer receives it (JSON data: arc_agi's tuples are lists)
    plain = [json.loads(json.dumps(e, default=str)) for e in entries]
    here = [float(rg.create_dataset(e["task"], seed=0, size=1, **e["config"]).score_answer(e["answer"], e))
            for e in plain]
    assert failed == 0
    assert {e["task"]: s for e, s, h in zip(entries, scores, here) if s != h} == {}


_ORACLE = {
    # the scorer's globals, by name: the fork evaluated a bare ``eval(answer)`` in the scorer's frame
    "string_insertion": ["entry['answer']", "job['entry']['answer']"],
    "spiral_matrix": ["entry['answer'].split()"],
    "binary_matrix": ["[r.split() for r in entry['answer'].splitlines()]"],
    "n_queens": ["[r.split() for r in entry['metadata']['valid\\x5fanswers'][0].splitlines()]"],
}
_WALK = ("[h.append(('{0[0].gi\\x5fframe.%s}'.format(h) for x in [1])) or next(h[0]) for h in [[]]][0]")
"""A generator that formats its own frame's attributes (no underscore touching a word: the guard
passes it): the frames below the answer's, as far as they go."""


@pytest.mark.parametrize("task", sorted(_ORACLE))
def test_an_answer_cannot_read_the_oracle_from_the_scorers_memory(task):
    """Through the real reward and its guard: an answer that evaluates to the entry's own answer
    (by a name of the scorer's, or by walking up from its frame to the scorer's globals or to
    ``score_answer``'s locals) copied the oracle, it did not answer: 0, not the task's partial credit."""
    entry = _entry(task)
    key = "[metadata][valid\\x5fanswers][0]" if task == "n_queens" else "[answer]"
    walks = [_WALK % ("f\\x5fback" + ".f\\x5fback" * up + ".f\\x5f" + where + key)
             for up in range(6) for where in ("globals[entry]", "globals[job][entry]", "locals[entry]")]
    if task == "string_insertion":
        answers = _ORACLE[task] + walks
    elif task == "spiral_matrix":
        answers = _ORACLE[task] + [w + ".split()" for w in walks]
    else:
        answers = _ORACLE[task] + [f"[r.split() for r in {w}.splitlines()]" for w in walks]
    assert not any(looks_like_code(task, a) for a in answers)
    fn = load_reward("reasoning_gym")
    scores = fn([""] * len(answers), [f"<answer>{a}</answer>" for a in answers], reasoning_gym=[entry] * len(answers))
    assert {a: s for a, s in zip(answers, scores) if s} == {}


def test_answers_the_packages_own_scorers_reward_wrongly_score_zero():
    """Two of reasoning-gym's scorers reward any answer: game_of_life_halting compares
    ``bool(answer) == bool(entry["answer"])`` of texts (every non-empty answer is 1.0, ``"False"``
    rows too), complex_arithmetic scores ``min(1.0, exp(-distance))`` and a ``nan`` distance makes
    that 1.0. A policy finds both at once: the reward scores them as the tasks mean (right 1.0)."""
    fn = load_reward("reasoning_gym")
    halting = [r["reasoning_gym"] for r in load_records("reasoning_gym:game_of_life_halting?size=8&test_size=1")]
    assert {e["answer"] for e in halting} == {"True", "False"}
    wrong = [{"True": "False", "False": "True"}[e["answer"]] for e in halting]
    for answers in (["banana"] * len(halting), wrong):
        assert fn([""] * len(halting), [f"<answer>{a}</answer>" for a in answers], reasoning_gym=halting) == \
            [0.0] * len(halting)
    right = [e["answer"] for e in halting] + [e["answer"].lower() for e in halting]
    assert fn([""] * len(right), [f"<answer>{a}</answer>" for a in right], reasoning_gym=halting * 2) == \
        [1.0] * len(right)
    complex_ = _entry("complex_arithmetic")
    answers = ["nan", "NaN", "-nan", "nan+nanj", "(nan) + nan i", "nanj", complex_["answer"]]
    scores = fn([""] * len(answers), [f"<answer>{a}</answer>" for a in answers], reasoning_gym=[complex_] * len(answers))
    assert scores == [0.0] * (len(answers) - 1) + [1.0]
