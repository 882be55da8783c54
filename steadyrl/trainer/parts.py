"""The step's state, typed: :class:`Run` and its parts (:class:`RunModels`, :class:`RunTask`,
:class:`RunOptim`, :class:`RunState`), which the builders (:func:`steadyrl.assembly.setup.build_run`)
fill and the step's functions read. They live here, with the step, so that ``trainer/`` never
imports the builders or the harness above it: the asynchronous rollout worker is typed by the
:class:`Rollouts` protocol (:class:`steadyrl.run.asynchronous.AsyncRollouts` implements it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:  # annotations only: importing this module loads neither torch nor the rooms it names
    import torch

    from ..config.schema import Config
    from ..data import PromptSampler
    from ..data.prompts import PromptItem
    from ..functional import AdaptiveKLController, FixedKLController, RunningMoments
    from ..rewards.scorer import Scorer
    from ..agents.protocol import Agent
    from ..rollout.base import Engine, Generator, Tokenizer
    from ..rollout.driver import Draw, EpisodeDriver


class Rollouts(Protocol):
    """What the step asks of the asynchronous rollout worker (``rollout.asynchronous``)."""

    def push(self, version: int) -> None: ...

    def take(self, step: int) -> tuple[Draw, dict[str, float]]: ...

    def state_dict(self) -> dict: ...

    def close(self) -> None: ...


def show_nothing(engine, when: str) -> None:
    """A task that shows nothing before and after RL."""


@dataclass
class RunState:
    """Counters that a checkpoint carries."""

    step: int = 0
    skipped_steps: int = 0
    consecutive_skips: int = 0
    consecutive_empty: int = 0  # steps in a row where no sample had a valid reward
    empty_cause: str | None = None  # the last such step's: the agent's calls to the gateway failed (run.report)
    warnings: int = 0
    warned: list = field(default_factory=list)  # "Category: text" of each Python warning counted in warnings
    wall_time_s: float = 0.0
    eval_before: dict | None = None
    dropped_prompts: int = 0


@dataclass
class RunModels:
    """The models of a run: ``policy`` (the trained model), ``reference`` (frozen; None without
    KL, or with LoRA, whose reference is the policy with its adapter off:
    ``uses_adapter_reference``), ``critic`` (GAE only); ``train_policy`` / ``train_critic`` (what
    the update runs through: the data-parallel wrappers, None in one process), ``generator``
    (what the engine generates with: the policy, or its FSDP view), the ``tokenizer`` and, for a
    vision-language model, its ``processor`` (None for a text model)."""

    tokenizer: Tokenizer
    policy: torch.nn.Module
    reference: torch.nn.Module | None
    critic: torch.nn.Module | None
    train_policy: torch.nn.Module | None = None
    train_critic: torch.nn.Module | None = None
    generator: Generator | None = None
    uses_adapter_reference: bool = False
    teacher: torch.nn.Module | None = None  # on-policy distillation's frozen teacher (teacher.*), or None
    processor: object | None = None  # a vision-language model's processor (steadyrl.vlm), None for a text model

    def training_models(self) -> tuple[torch.nn.Module, torch.nn.Module | None]:
        """``(policy, critic)`` to run forward/backward passes through."""
        policy = self.policy if self.train_policy is None else self.train_policy
        critic = self.critic if self.train_critic is None else self.train_critic
        return policy, critic


@dataclass
class RunTask:
    """What a run trains on: ``scorer`` (the reward functions), ``train_prompts`` /
    ``eval_prompts`` / ``eval_sets`` (``data.eval_sources``: each set on its own), ``sampler``
    (draws each step's prompts; a MixtureSampler with ``data.train_sources``), ``agent``
    (multi-turn: answers the policy's turns; None = one turn), ``driver`` (what runs a step's
    episodes: chosen once, here, from the agent's declared capabilities by
    :func:`~steadyrl.rollout.driver.episode_driver`), ``show`` (what the task prints before and
    after RL)."""

    scorer: Scorer
    train_prompts: list[PromptItem]
    eval_prompts: list[PromptItem]
    sampler: PromptSampler
    agent: Agent | None = None
    eval_sets: dict[str, list[PromptItem]] | None = None
    show: Callable[[Engine, str], None] = show_nothing
    driver: EpisodeDriver | None = None  # None: chosen from ``agent`` when the task is built
    processor: object | None = None  # a vision-language policy's (its episodes render observation images)

    def __post_init__(self) -> None:
        if self.driver is None:
            from ..rollout.driver import episode_driver  # not at import: this module loads no room it names

            self.driver = episode_driver(self.agent, self.processor)


@dataclass
class RunOptim:
    """What updates the models, and what a checkpoint carries of it: ``optimizer``,
    ``critic_optimizer``, ``scheduler``, ``kl_controller``, ``running`` (reward statistics)."""

    optimizer: torch.optim.Optimizer
    critic_optimizer: torch.optim.Optimizer | None
    scheduler: torch.optim.lr_scheduler.LambdaLR
    kl_controller: FixedKLController | AdaptiveKLController
    running: RunningMoments


@dataclass
class Run:
    """Everything a run holds (built by :func:`build_run`), in parts:

    * **where**: ``config``, ``output_dir``, ``device``, ``total_steps`` (``trainer.max_steps``,
      or fewer when ``trainer.max_epochs`` ends first);
    * ``models`` (:class:`RunModels`), ``task`` (:class:`RunTask`), ``optim`` (:class:`RunOptim`);
    * **state**: ``state`` (the counters a checkpoint carries) and ``rollouts`` (the asynchronous
      rollout worker when ``rollout.asynchronous.max_staleness`` is set).

    A part's attributes are read through the part (``run.models.policy``, ``run.task.scorer``,
    ``run.optim.optimizer``): nothing is forwarded, so a type checker and go-to-definition see them.
    """

    config: Config
    output_dir: Path
    device: torch.device
    models: RunModels
    task: RunTask
    optim: RunOptim
    total_steps: int = 0
    state: RunState = field(default_factory=RunState)
    rollouts: Rollouts | None = None
