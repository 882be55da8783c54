"""The exceptions steadyrl raises on purpose, and the exit status each maps to.

* :class:`ConfigError` (and its subclasses): the user's configuration or input is wrong. The
  message names the field, the value and what would be valid. ``steadyrl`` exits with status 2,
  printing only the message.
* Anything else is a run-time failure: exit status 1 with a traceback.
"""


class SteadyRLError(Exception):
    """Base class of steadyrl's own errors."""


class ConfigError(SteadyRLError, ValueError):
    """Invalid configuration or input: exit status 2."""


class DataError(ConfigError):
    """A data file is missing, empty, unreadable, or lacks a column."""


class RewardLoadError(ConfigError):
    """A reward function spec does not name an importable callable."""


class RewardCallError(ConfigError):
    """A reward function's signature cannot take the call made to it (found on the first batch)."""


class ModelLoadError(ConfigError):
    """A model or tokenizer path / hub name cannot be loaded."""


class TrainingHalted(SteadyRLError):
    """Training stopped on purpose (e.g. too many non-finite steps in a row): exit status 1."""


class DoctorHalted(TrainingHalted):
    """A detector named in ``trainer.halt_on`` fired during training (exit status 1, state saved)."""


class RolloutWorkerError(TrainingHalted):
    """The asynchronous rollout worker process died or raised (exit status 1, its traceback said)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run, once its directory exists: ``hint`` says how to continue it (the
    command prints it under ``steadyrl: interrupted``; exit status 130 as for any Ctrl-C)."""

    def __init__(self, hint: str) -> None:
        super().__init__(hint)
        self.hint = hint
