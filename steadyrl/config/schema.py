"""The typed configuration of a steadyrl run: every hyperparameter, its default and its help text.

Validated by pydantic when loaded, before any model is loaded. Defaults follow the seed notes
(``shared/seeds/``): clip 0.2, dual-clip constant ``1 + 2 * clip``, GAE lambda 0.95, gamma 1.0,
max_grad_norm 1.0, ppo_epochs 1, difficulty mask (0.1, 0.95). Algorithm presets
(:mod:`steadyrl.config.presets`) fill the ``algorithm`` section's unset keys explicitly.

The sections live one module each in :mod:`steadyrl.config.sections` (``model``, ``data``, ``rewards``,
``rollout`` with ``multi_turn`` (its ``rollout.multi_turn``), ``algorithm``, ``trainer``, ``eval``, ``demo``;
``base`` the blocks they share); this module
is their face: it re-exports every section and holds :class:`Config`, the whole run, with the checks
that read more than one section.

The rules of what is not supported together (:mod:`.compat`) are registered in :data:`LOAD_RULES` when
the package loads, so that this module, which runs them, does not import the module that writes them.
"""

from __future__ import annotations

from typing import Callable

from pydantic import Field, PrivateAttr, model_validator

from ..reward_specs import url_option_problems
from .sections.base import ASYNC_TIS_CAP, Beta, F, MAX_MIB, MAX_PROCESSES, MAX_SAMPLES, MAX_SECONDS, MAX_TOKENS, MAX_WIDTH, Section  # noqa: F401
from .sections.model import LoraConfig, ModelConfig, TeacherConfig  # noqa: F401
from .sections.data import DataConfig, GENERATED, SourceConfig, check_generated_splits  # noqa: F401
from .sections.rewards import RewardConfig, RewardLimitsConfig  # noqa: F401
from .sections.multi_turn import MultiTurnConfig  # noqa: F401
from .sections.rollout import AsynchronousConfig, CORRECTION_BOUNDS, CorrectionConfig, CorrectionMode, RolloutConfig, VLLMConfig  # noqa: F401
from .sections.algorithm import AdvantageName, AlgorithmConfig, GROUPED_BY_ESTIMATOR, KLEstimator, LossAggMode, NormType, PolicyLossName, PresetName  # noqa: F401
from .sections.trainer import OptimConfig, TrainerConfig  # noqa: F401
from .sections.eval import EvalConfig  # noqa: F401
from .sections.demo import DemoConfig  # noqa: F401

LOAD_RULES: list[Callable[["Config"], None]] = []
"""Checks of a whole config run by its validator, each raising ValueError: :mod:`.compat`'s
``check_config``, appended when :mod:`steadyrl.config` is imported (before any config exists)."""


def _check_sources(config: "Config") -> None:
    """One of train_path / train_sources, one of eval_path / eval_sources; domains need domain_key."""
    data = config.data
    check_generated_splits(data)
    for one, many in (("train_path", "train_sources"), ("eval_path", "eval_sources")):
        if getattr(data, one) is not None and getattr(data, many) is not None:
            raise ValueError(f"data.{one} and data.{many} are both set: use {one} for one file or {many} "
                             "for several, not both")
        sources = getattr(data, many)
        if sources is None:
            continue
        if not sources:
            raise ValueError(f"data.{many} is an empty list: give at least one source, or null")
        keys = [s.key for s in sources]
        for i, key in enumerate(keys):
            if key in keys[:i]:
                raise ValueError(f"data.{many}[{keys.index(key)}] and data.{many}[{i}] are both named {key!r}; "
                                 f"set data.{many}[{i}].name to tell them apart")
        for i, source in enumerate(sources):
            if source.domain is not None and data.domain_key is None:
                raise ValueError(f"data.{many}[{i}].domain = {source.domain!r} needs data.domain_key: the "
                                 "column the domain is written to (e.g. domain_key: domain)")
    if data.domain_key is None:
        restricted = [i for i, r in enumerate(config.rewards) if r.domains is not None]
        if restricted:
            raise ValueError(f"rewards[{restricted[0]}].domains is set but data.domain_key is null: name the "
                             "column holding each row's domain (e.g. data.domain_key: domain)")
        if config.algorithm.reward_norm_by_domain:
            raise ValueError("algorithm.reward_norm_by_domain = true needs data.domain_key (the column "
                             "holding each row's domain)")


def overlong_limit(config: "Config") -> int:
    """The length the overlong buffer ends at: a turn's budget, or the episode's (algorithm.overlong_scope)."""
    r = config.rollout
    episode = r.multi_turn.enabled and config.algorithm.overlong_scope == "episode"
    return r.episode_token_limit if episode else r.max_new_tokens


def _check_overlong(config: "Config") -> None:
    buffer = config.algorithm.overlong_buffer
    if buffer is not None and buffer > overlong_limit(config):
        where = ("rollout.max_new_tokens" if config.algorithm.overlong_scope == "turn"
                 else "the episode's token limit (rollout.max_new_tokens, or rollout.multi_turn.max_episode_tokens)")
        raise ValueError(f"algorithm.overlong_buffer = {buffer} is longer than {where} = "
                         f"{overlong_limit(config)}: the buffer is the last tokens before that limit; set it at "
                         f"most to the limit (DAPO used 4096 of 20480)")


def _check_reward_options(config: "Config") -> None:
    """A built-in reward's options against its typed model (:mod:`.reward_options`: names, types,
    ranges, required options) and the URLs of those that call a server (http's url, llm_judge's
    base_url, code's url), checked here so that a bad one stops even ``steadyrl config show``.
    What needs the machine (a model that loads, a server that answers) is checked when the reward
    is built, prefixed ``rewards[i]:``."""
    from .reward_options import option_problems  # it imports this module's neighbours, not this one

    problems = []
    for i, reward in enumerate(config.rewards):
        where = f"rewards[{i}].options"
        for key, value, problem in option_problems(reward.name, reward.options):
            at = f"{where}.{key}" if key is not None else where
            problems.append(f"{at} = {value!r}: {problem}" if key is not None and value is not None
                            else f"{at}: {problem}")
        for key, value, problem in url_option_problems(reward.name, reward.options):
            problems.append(f"{where}.{key} = {value!r}: {problem}")
    if problems:
        raise ValueError("; ".join(problems))


class Config(Section):
    """A whole run."""

    _renamed_notes: list[str] = PrivateAttr(default_factory=list)
    """Deprecation notes of the old key names this config was loaded with (:mod:`.renamed`)."""
    _written: frozenset[str] | None = PrivateAttr(default=None)
    """The dotted keys the user wrote (file and command line; :mod:`.inert`); None = not loaded by
    :func:`~steadyrl.config.loading.load_config`: the keys set on the models count."""

    _source: tuple[str, str, dict] | None = PrivateAttr(default=None)
    """``(path, SHA-256, mapping)`` of the very bytes of the config file it was loaded from (one
    read: :func:`steadyrl.run.trust.check_config_code` judges those, not what the path holds later)."""

    def __eq__(self, other: object) -> bool:
        """Equal settings: who wrote them (``_written``) and from what file (``_source``) is
        provenance, not a setting."""
        if not isinstance(other, Config):
            return NotImplemented
        mine, theirs = ({k: v for k, v in (c.__pydantic_private__ or {}).items() if k not in ("_written", "_source")}
                        for c in (self, other))
        return type(self) is type(other) and self.__dict__ == other.__dict__ and mine == theirs

    __hash__ = None  # as pydantic's models: mutable, not hashable

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rewards: list[RewardConfig] = F([], "Reward functions and weights; empty = the task's default "
                                    "(the demo's reverse-match reward, or 'math').")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    demo: DemoConfig = Field(default_factory=DemoConfig)
    teacher: TeacherConfig = Field(default_factory=TeacherConfig)

    @property
    def is_demo(self) -> bool:
        return self.data.train_path is None and self.data.train_sources is None

    @model_validator(mode="after")
    def _check(self) -> "Config":
        _check_sources(self)
        if self.model.gguf_file is not None and self.is_demo:
            raise ValueError(f"model.gguf_file = {self.model.gguf_file!r} but data.train_path is not set: the "
                             "built-in demo trains its own model; set data.train_path to train the GGUF's")
        if self.model.name_or_path is None and self.model.gguf_file is None and not self.is_demo:
            raise ValueError(
                "model.name_or_path is null (the built-in demo model) but data.train_path is set: "
                "name a model for your data, or unset data.train_path for the demo"
            )
        for check in LOAD_RULES:  # what is not supported together (config/compat.py registers them)
            check(self)
        _check_overlong(self)
        _check_reward_options(self)
        keys = [reward.key for reward in self.rewards]
        for i, key in enumerate(keys):
            if key in keys[:i]:
                first = keys.index(key)
                raise ValueError(
                    f"rewards[{first}] and rewards[{i}] are both named {key!r}, but reward names must be "
                    f"unique (each is logged as reward/<name> and weighted by it): set rewards[i].label to "
                    f"tell them apart, e.g. label: {key}_{i} on rewards[{i}]"
                )
        return self
