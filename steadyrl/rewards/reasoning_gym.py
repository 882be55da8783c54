"""The ``reasoning_gym`` built-in: a completion scored by its reasoning-gym task's own ``score_answer``.

Rows from ``data.train_path: reasoning_gym:<task>`` (:mod:`steadyrl.envs.reasoning_gym`) carry
their entry in the column ``reasoning_gym``. The reward reads the answer out of the completion with
reasoning-gym's ``extract_answer`` (the last ``<answer>...</answer>``; option ``answer_tag``, or
``answer_tag: null`` for the whole completion, stripped; or option ``marker``, e.g.
``"The answer is"``: the rest of the line after its last occurrence, without the trailing
full stop, for a model that answers in a sentence instead of tags) and returns
``score_answer(answer, entry)`` of a dataset built with the row's task and config, so the score is
exactly the package's: 1.0 right, 0.0 wrong or no answer, partial credit where the task gives it.
Rows of several tasks can be mixed: each row names its own.
"""

from __future__ import annotations

import json

from .registry import RewardFn, register_reward
from .verifiers import TRAILING_PUNCTUATION, extract_answer as rest_of_line


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

    datasets: dict[str, object] = {}  # one per (task, config): built once, kept (in the worker too)

    def scorer(entry: dict):
        key = json.dumps([entry["task"], entry["config"]], sort_keys=True, default=str)
        if key not in datasets:
            from ..envs.reasoning_gym import make_dataset

            datasets[key] = make_dataset(entry["task"], entry["config"], seed=0, size=1,
                                         where=f"reasoning_gym reward on task {entry['task']!r}")
        return datasets[key].score_answer

    def reasoning_gym(prompts: list[str], completions: list[str], **columns) -> list[float | None]:
        if column not in columns:
            raise KeyError(f"the reasoning_gym reward reads column {column!r} (rows of data.train_path: "
                           f"reasoning_gym:<task>), but the batch has columns {sorted(columns)}")
        out: list[float | None] = []
        for completion, entry in zip(completions, columns[column], strict=True):
            if not isinstance(entry, dict) or "task" not in entry:
                out.append(None)  # not a reasoning-gym row: cannot score it
                continue
            if marker is not None:
                answer = _after_marker(completion, marker)
            elif answer_tag is None:
                answer = completion.strip()
            else:
                answer = extract_answer(completion, tag_name=answer_tag)
            out.append(float(scorer(entry)(answer, entry)))
        return out

    reasoning_gym.reads_columns = (column,)
    return reasoning_gym
