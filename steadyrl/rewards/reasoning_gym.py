"""The ``reasoning_gym`` built-in: a completion scored by its reasoning-gym task's own ``score_answer``.

Rows from ``data.train_path: reasoning_gym:<task>`` (:mod:`steadyrl.envs.reasoning_gym`) carry
their entry in the column ``reasoning_gym``. The reward reads the answer out of the completion with
reasoning-gym's ``extract_answer`` (the last ``<answer>...</answer>``; option ``answer_tag``, or
``answer_tag: null`` for the whole completion, stripped; or option ``marker``, e.g.
``"The answer is"``: the rest of the line after its last occurrence, without the trailing
full stop, for a model that answers in a sentence instead of tags) and returns
``score_answer(answer, entry)`` of a dataset built with the row's task and config, so the score is
exactly the package's: 1.0 right, 0.0 wrong or no answer, partial credit where the task gives it
(but for :data:`UNSOUND`: two scorers that give 1.0 to any answer or to ``nan``, scored as meant).
Rows of several tasks can be mixed: each row names its own.

**Contained.** Some tasks' ``score_answer`` runs the answer (:data:`RUNS_ANSWER`: ``eval`` or
sympy's ``parse_expr`` of the policy's text), and a package's other scorers may too, so every
answer is scored in a fresh, contained process per sample (:mod:`.contained`: no network, no
writable host file, no secrets, limits; a sample cannot patch the scorer for the next). An answer
to one of :data:`RUNS_ANSWER` that reads as Python rather than as an answer (an underscore touching
a word, or a name of :data:`CODE_NAMES`, read after NFKC as Python reads identifiers) scores 0 before
it is scored. That guard is a courtesy, not the defence: the score travels on a pipe no answer can
write (:mod:`.contained_verdict`). Where no sandbox exists (not Linux) the
tasks of :data:`RUNS_ANSWER` are refused and the others score in-process.
"""

from __future__ import annotations

import json
import re
import unicodedata

from . import contained
from .registry import RewardFn, register_reward
from .verifiers import TRAILING_PUNCTUATION, extract_answer as rest_of_line

RUNS_ANSWER = frozenset({"countdown", "puzzle24", "spiral_matrix", "string_insertion", "binary_matrix", "n_queens",
                         "polynomial_multiplication", "simple_integration", "intermediate_integration"})
"""Tasks whose ``score_answer`` evaluates the answer as Python (reasoning-gym 0.1; read from its source)."""
CODE_NAMES = ("exec", "eval", "compile", "open", "print", "input", "getattr", "setattr", "delattr", "globals",
              "locals", "vars", "chr", "lambda", "import", "breakpoint", "exit", "quit", "help", "memoryview",
              "preview", "lambdify", "var", "system", "subprocess")
_CODE = re.compile(r"(?<=\w)_|_(?=\w)|\b(?:" + "|".join(CODE_NAMES) + r")\b")
"""An underscore inside or next to a word (``__import__``, ``a_b``; n_queens' boards are ``_ Q _``), or a name of :data:`CODE_NAMES`."""
UNSOUND = frozenset({"game_of_life_halting", "complex_arithmetic"})
"""Tasks whose ``score_answer`` (reasoning-gym 0.1) gives full marks to answers that are not answers:
game_of_life_halting compares ``bool(answer) == bool(entry["answer"])`` of texts (any non-empty
answer is 1.0, on ``"False"`` rows too); complex_arithmetic returns ``min(1.0, exp(-distance))``,
1.0 for a ``nan`` answer. :func:`sound_score` scores those answers as the tasks mean."""


def sound_score(task: str, answer: str | None, entry: dict) -> float | None:
    """The score of ``answer`` where the package's scorer would reward it wrongly (:data:`UNSOUND`);
    ``None``: the package's own score stands."""
    if task == "game_of_life_halting":  # the answer is True or False, as the entry's (a text)
        return float(answer is not None and answer.strip().lower() == str(entry.get("answer")).strip().lower())
    if task == "complex_arithmetic" and answer is not None and "nan" in answer.lower():
        return 0.0  # not a number: the package's distance is nan, and min(1.0, exp(-nan)) is 1.0
    return None


SCORER = """
import reasoning_gym
job = json.loads(sys.stdin.readline())
entry = job["entry"]
dataset = reasoning_gym.create_dataset(entry["task"], seed=0, size=1, **entry["config"])
contain_eval()  # the answer is model-written: every eval from here on runs in a fork without the verdict pipe
verdict(dataset.score_answer(job["answer"], entry))
"""
"""The per-sample script of :func:`steadyrl.rewards.contained.score_contained` (after its prelude,
:mod:`.contained_verdict`, which defines ``contain_eval`` and ``verdict``)."""


def looks_like_code(task: str, answer: str | None) -> bool:
    """Whether ``answer`` to ``task`` (one of :data:`RUNS_ANSWER`) reads as Python, not as an answer."""
    # Python folds identifiers by NFKC (``ｐｒｉｎｔ`` is ``print``): the guard reads the text as Python would
    if task not in RUNS_ANSWER or answer is None:
        return False
    return _CODE.search(unicodedata.normalize("NFKC", answer)) is not None


def _after_marker(completion: str, marker: str) -> str | None:
    """The rest of the line after the last ``marker``, stripped of spaces and trailing punctuation."""
    answer = rest_of_line(completion, marker=marker)
    return None if answer is None else answer.strip().rstrip(TRAILING_PUNCTUATION).strip()


@register_reward("reasoning_gym")
def reasoning_gym_reward(*, answer_tag: str | None = "answer", column: str = "reasoning_gym",
                         marker: str | None = None) -> RewardFn:
    """Score by the task's ``score_answer`` (module docstring)."""
    from ..envs.spec import require

    require("reasoning_gym", "rewards: reasoning_gym")
    from reasoning_gym.utils import extract_answer

    here = not contained.available()
    datasets: dict[str, object] = {}  # in-process (no sandbox here): one per (task, config), kept

    def in_process(answer, entry: dict) -> float:
        if entry["task"] in RUNS_ANSWER:
            raise RuntimeError(f"the reasoning_gym reward: task {entry['task']!r} scores an answer by running "
                               "it, and this machine has no sandbox to contain that (Linux only)")
        key = json.dumps([entry["task"], entry["config"]], sort_keys=True, default=str)
        if key not in datasets:
            from ..envs.reasoning_gym import make_dataset

            datasets[key] = make_dataset(entry["task"], entry["config"], seed=0, size=1,
                                         where=f"reasoning_gym reward on task {entry['task']!r}")
        return float(datasets[key].score_answer(answer, entry))

    def answer_of(completion: str) -> str | None:
        if marker is not None:
            return _after_marker(completion, marker)
        if answer_tag is None:
            return completion.strip()
        return extract_answer(completion, tag_name=answer_tag)

    def reasoning_gym(prompts: list[str], completions: list[str], **columns) -> list[float | None]:
        if column not in columns:
            raise KeyError(f"the reasoning_gym reward reads column {column!r} (rows of data.train_path: "
                           f"reasoning_gym:<task>), but the batch has columns {sorted(columns)}")
        out: list[float | None] = []
        todo: dict[int, dict] = {}
        for i, (completion, entry) in enumerate(zip(completions, columns[column], strict=True)):
            if not isinstance(entry, dict) or "task" not in entry:
                out.append(None)  # not a reasoning-gym row: cannot score it
                continue
            answer = answer_of(completion)
            out.append(0.0)
            if looks_like_code(entry["task"], answer):
                continue
            sound = sound_score(entry["task"], answer, entry)
            if sound is not None:
                out[i] = sound
                continue
            if here:
                out[i] = in_process(answer, entry)
            else:
                todo[i] = {"answer": answer, "entry": _plain(entry)}
        if todo:
            scores, _ = contained.score_contained(SCORER, ("reasoning_gym",), list(todo.values()))
            for i, score in zip(todo, scores):
                out[i] = score
        return out

    reasoning_gym.reads_columns = (column,)
    reasoning_gym.preferred_chunk_size = None  # one contained harness per batch, a fresh fork per sample
    return reasoning_gym


def _plain(entry: dict) -> dict:
    """The entry as JSON data (a row read back from a file may hold other types)."""
    return json.loads(json.dumps(entry, default=str))
