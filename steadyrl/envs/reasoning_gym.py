"""reasoning-gym tasks as prompt rows: ``reasoning_gym:<task>[?options]`` as a data path.

Rows are generated, not read: the task's procedural generator (``reasoning_gym.create_dataset``)
makes them from a seed, so the same spec gives the same rows on every machine, and nothing is
downloaded. Options (all optional):

* ``seed`` (int, default 0): the data seed. Deliberately not ``trainer.seed``: like a file, a
  task's rows stay the same when the training seed changes (which still orders and samples them);
* ``size`` (int, default 1000): training rows; ``test_size`` (int, default 100): held-out rows;
* ``system_prompt`` (default ``default``): one of reasoning-gym's ``SYSTEM_PROMPTS`` (they ask for
  the answer in ``<answer></answer>`` tags), making each prompt ``[system, user]`` messages, or
  ``none``: the question alone, as a plain string (for a tokenizer without a chat template; with
  ``data.chat_template: true`` it becomes one user message under the template's own system prompt);
* ``instruction`` (default empty): text appended to every question (after a space) in the prompt,
  e.g. ``Reply in the form: The answer is N.`` for a small model that never writes answer tags
  (score it with the reward's ``marker`` option). The entry the reward scores keeps the task's
  question as it was;
* everything else goes to the task's own config (``min_terms=2&max_terms=3``); the task refuses
  what it does not know.

The split decides the rows: ``train`` (``data.split`` null) or ``test`` (``data.eval_path``
reads it by default). The held-out rows come from their own seed stream (``seed + HELD_OUT_OFFSET``)
and every training row whose question is also a held-out question is dropped, so the two are
disjoint whatever the task's problem space.

Each row is ``{"prompt", "answer", "reasoning_gym": {"task", "config", "question", "answer",
"metadata"}}``; the built-in reward ``reasoning_gym`` (:mod:`steadyrl.rewards.reasoning_gym`)
scores a completion with the task's own ``score_answer`` on that entry.
"""

from __future__ import annotations

import difflib

from .options import ReasoningGymRows
from ..errors import ConfigError, DataError
from .spec import Spec, require, take

COLUMN = "reasoning_gym"
"""The column holding each row's entry for ``score_answer``."""
HELD_OUT_OFFSET = 1_000_000_007
"""The held-out rows' seed is the data seed plus this (the training rows use seeds ``seed + i``)."""
SPLITS = ("train", "test")
RESERVED = tuple(ReasoningGymRows.model_fields)  # the adapter's own options; the rest are the task's


def task_config(spec: Spec, key: str) -> tuple[dict, dict]:
    """``(adapter options, the task's config options)`` of ``spec``, checked."""
    options = dict(spec.options)
    own = {name: take(options, name, spec, key, ReasoningGymRows) for name in RESERVED}
    return own, options


def make_dataset(task: str, config: dict, *, seed: int, size: int, where: str):
    """The task's generator with ``config``; an unknown task or a refused option is a ConfigError."""
    rg = require("reasoning_gym", where)
    from reasoning_gym.factory import DATASETS

    if task not in DATASETS:
        close = difflib.get_close_matches(task, list(DATASETS), n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ConfigError(f"{where}: reasoning-gym has no task {task!r}{hint} ({len(DATASETS)} tasks: "
                          "python -c 'from reasoning_gym.factory import DATASETS; print(sorted(DATASETS))')")
    try:
        return rg.create_dataset(task, seed=seed, size=size, **config)
    except (TypeError, ValueError, AssertionError, KeyError) as err:
        raise ConfigError(f"{where}: the task {task!r} refuses its options {config}: "
                          f"{type(err).__name__}: {err}") from None


def _prompt(question: str, system_prompt: str, instruction: str, where: str):
    from reasoning_gym.utils import SYSTEM_PROMPTS

    if instruction.strip():
        question = f"{question.rstrip()} {instruction.strip()}"

    if system_prompt == "none":
        return question
    if system_prompt not in SYSTEM_PROMPTS:
        raise ConfigError(f"{where}: option system_prompt={system_prompt!r}; valid: "
                          f"{sorted(SYSTEM_PROMPTS) + ['none']}")
    return [{"role": "system", "content": SYSTEM_PROMPTS[system_prompt]}, {"role": "user", "content": question}]


def _entries(task: str, config: dict, seed: int, size: int, where: str) -> list[dict]:
    dataset = make_dataset(task, config, seed=seed, size=size, where=where)
    try:
        return [dataset[i] for i in range(size)]
    except Exception as err:  # noqa: BLE001 - a generator failing on these options is the user's input
        raise ConfigError(f"{where}: the task {task!r} failed to generate rows with {config}: "
                          f"{type(err).__name__}: {err}") from None


def task_records(spec: Spec, split: str | None, key: str) -> list[dict]:
    """The rows of ``split`` (``None`` = train) of the task ``spec`` names (module docstring)."""
    where = spec.where(key)
    split = "train" if split is None else split
    if split not in SPLITS:
        raise DataError(f"{where}: split {split!r}; a reasoning-gym task has the splits {list(SPLITS)}")
    own, config = task_config(spec, key)
    held_out = _entries(spec.target, config, own["seed"] + HELD_OUT_OFFSET, own["test_size"], where)
    if split == "test":
        entries = held_out
    else:
        seen = {e["question"] for e in held_out}
        entries = [e for e in _entries(spec.target, config, own["seed"], own["size"], where)
                   if e["question"] not in seen]
        if not entries:
            raise DataError(f"{where}: every training row repeats a held-out question; the task's problem "
                            "space is too small for test_size, lower it or widen the task's options")
    rows = []
    for entry in entries:
        rows.append({"prompt": _prompt(entry["question"], own["system_prompt"], own["instruction"], where),
                     "answer": entry["answer"],
                     COLUMN: {"task": spec.target, "config": config, "question": entry["question"],
                              "answer": entry["answer"], "metadata": entry.get("metadata", {})}})
    return rows
