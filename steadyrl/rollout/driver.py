"""The episodes of a step or an evaluation, from the run's rollout config.

* :func:`episode_driver` chooses, once, when the run's task is built, what runs a step's episodes:
  :class:`TurnDriver` (:func:`steadyrl.rollout.episodes.run_episodes`, which generates each turn
  and hands it to the agent; one turn when there is no agent), or an agent that declares it drives
  episodes itself (``drives_episodes``: the gateway's ``rollout.multi_turn.agent``);
* :func:`rollout` runs them through that driver with the turn limits of ``rollout.*``
  (:func:`turn_limits`);
* environment instances are seeded from ``trainer.seed``, the step and the sample's global index
  (:func:`episode_seeds`), so a resumed run replays the same episodes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

from .episode_images import check_mode
from .episodes import TurnLimits, run_episodes


@dataclass
class Draw:
    """One draw of a step: this rank's prompts, their episodes and scores, and how long each took."""

    prompts: list  # this rank's PromptItems
    gen: object  # Generation, group_size rows per prompt
    result: object  # ScoreResult
    generate_s: float
    score_s: float


def turn_limits(rollout_config, max_new_tokens: int | None = None) -> TurnLimits:
    mt = rollout_config.multi_turn
    per_turn = max_new_tokens or rollout_config.max_new_tokens
    episode = rollout_config.episode_token_limit if mt.enabled else per_turn
    return TurnLimits(max_turns=mt.max_turns if mt.enabled else 1, max_new_tokens=per_turn,
                      max_observation_tokens=mt.max_observation_tokens,
                      observation_truncation=mt.observation_truncation, episode_tokens=episode,
                      turn_reward=mt.turn_reward)


def episode_seeds(seed: int, step: int, first_row: int, rows: int) -> list[int]:
    """A 63-bit seed per sample from (trainer seed, step, global row): the same on a resumed run."""
    def one(row: int) -> int:
        digest = hashlib.blake2b(f"{seed}:{step}:{row}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1

    return [one(first_row + i) for i in range(rows)]


class EpisodeDriver(Protocol):
    """Runs ``n`` episodes of each of ``prompts`` -> one :class:`~steadyrl.rollout.base.Generation`."""

    def __call__(self, engine, tokenizer, prompts: list, n: int, limits: TurnLimits, *,
                 seeds: list[int] | None = None, **sampling): ...


@dataclass(frozen=True)
class TurnDriver:
    """The episode driver of an agent that answers turns (or of no agent: one turn each):
    :func:`~steadyrl.rollout.episodes.run_episodes` generates each turn and hands it to ``agent``.
    ``processor``: a vision-language policy's (observations may hold images; None: a text policy,
    an image in an observation is an error); it refuses ``rollout.multi_turn.mode: stepwise``."""

    agent: object | None = None
    processor: object | None = None

    def __post_init__(self):
        if self.agent is not None and self.processor is not None:
            check_mode(self.agent.multi_turn_mode, self.processor)

    def __call__(self, engine, tokenizer, prompts: list, n: int, limits: TurnLimits, *,
                 seeds: list[int] | None = None, **sampling):
        return run_episodes(engine, tokenizer, prompts, n, agent=self.agent, limits=limits, seeds=seeds,
                            processor=self.processor, **sampling)


def episode_driver(agent, processor=None) -> EpisodeDriver:
    """What runs the episodes of ``agent`` (None: one turn, no agent), chosen once when the run's
    task is built from the capability the agent declares (``drives_episodes``): the agent's own
    ``rollout`` (the gateway's ``rollout.multi_turn.agent``), else a :class:`TurnDriver` (with the policy's
    ``processor``, a vision-language model's)."""
    if agent is not None and agent.drives_episodes:
        return agent.rollout
    return TurnDriver(agent, processor)


def rollout(engine, tokenizer, driver: EpisodeDriver, prompts: list, n: int, rollout_config, *,
            seeds: list[int] | None = None, max_new_tokens: int | None = None, **sampling):
    """The episodes of ``prompts`` (``n`` each) as one :class:`~steadyrl.rollout.base.Generation`,
    run by ``driver`` (:func:`episode_driver`) with the turn limits of ``rollout_config``."""
    return driver(engine, tokenizer, prompts, n, turn_limits(rollout_config, max_new_tokens), seeds=seeds,
                  **sampling)
