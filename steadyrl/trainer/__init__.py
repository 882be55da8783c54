"""The RL loop: :mod:`.recipe` (``train``, ``train_step``, ``evaluate_run``) and the pieces of a step."""

from .recipe import evaluate_run, train

__all__ = ["train", "evaluate_run"]
