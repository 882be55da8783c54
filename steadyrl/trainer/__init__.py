"""The RL loop: rollout -> score -> process -> update -> log -> checkpoint."""

from .loop import evaluate_run, train

__all__ = ["train", "evaluate_run"]
