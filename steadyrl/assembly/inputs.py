"""The contract between a run's task and the step that assembles the run: the :class:`Task` protocol
(the hooks every task has, a user's or the demo's) and the :class:`Inputs` its hooks are handed.

Both live here, below :mod:`.task` and :mod:`.setup`, so that neither of those imports the other:
``setup`` calls the task's hooks with ``Inputs``, and the hooks are typed by the ``Inputs`` they get.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:  # annotations only: importing this module loads neither torch nor the rewards
    from contextlib import ExitStack
    from pathlib import Path

    import torch

    from ..config.schema import Config
    from ..rewards import RewardSpec
    from ..rewards.scorer import Scorer
    from ..rollout.base import Engine
    from ..trainer.parts import Run
    from .prompts import Prompts
    from .sources import Part

__all__ = ["Task", "Inputs"]


class Task(Protocol):
    """A run's task: what it trains on, where its model comes from, what it shows."""

    resume_keys: tuple[str, ...]
    """Config keys a checkpoint of this task was built from, beyond ``run.directory.RESUME_KEYS``."""

    def records(self, config: Config, for_eval: bool, quiet: bool = False
                ) -> tuple[list, list, list | None, list | None, list[RewardSpec]]:
        """``(train, evals, train_parts, eval_parts, default rewards)``; ``quiet``: no console notes.
        Default rewards are built only when the config names none and has no environment."""

    def check_model(self, config: Config, inputs: Inputs) -> Prompts | None:
        """Before the run directory is touched: the model's source and the prompts against it
        (None: the task's model is built later, by :meth:`model`)."""

    def model(self, config: Config, output_dir: Path, inputs: Inputs) -> Prompts:
        """After: the model to load and the prompts tokenized with its tokenizer (``inputs.prompts``:
        what :meth:`check_model` returned)."""

    def show(self, config: Config, run: Run) -> Callable[[Engine, str], None]:
        """``show(engine, when)``: what the task prints before and after RL."""

    def check_eval(self, config: Config, model_path: str, of_run_dir: bool) -> None:
        """``steadyrl eval``: refuses what the task cannot be evaluated on."""

    def preflight_train(self, config: Config) -> None:
        """``steadyrl train``'s checks of the task that need no model, before torch is imported
        (:mod:`steadyrl.preflight.inputs`)."""

    def preflight_eval(self, config: Config, model_path: str | None, of_run_dir: bool) -> None:
        """``steadyrl eval``'s, the same way (``model_path`` None: a run directory's checkpoint)."""



@dataclass
class Inputs:
    """What :func:`check_inputs` read and checked, before anything is written or loaded."""

    device: torch.device
    train_records: list[dict]
    eval_records: list[dict]
    scorer: Scorer
    task: Task  # the user's, or the demo's (assembly/task.py task_of)
    train_parts: list[Part] | None = None  # data.train_sources, records
    eval_parts: list[Part] | None = None  # data.eval_sources, records
    # what the task's check_model returned: the model, its tokenizer, the agent, the prompts
    # tokenized with it; None until the task's model is known (the demo's: built in the run directory)
    prompts: Prompts | None = None
    resources: ExitStack | None = None  # what owns the scorer's and the agent's workers
