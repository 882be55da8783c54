"""The episodes of a step or an evaluation, from the run's rollout config.

* :func:`rollout` runs them through :func:`steadyrl.rollout.episodes.run_episodes` — one turn when
  there is no agent — with the turn limits of ``rollout.*`` (:func:`turn_limits`);
* environment instances are seeded from ``trainer.seed``, the step and the sample's global index
  (:func:`episode_seeds`), so a resumed run replays the same episodes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

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
    ro = rollout_config
    per_turn = max_new_tokens or ro.max_new_tokens
    episode = ro.episode_token_limit if ro.multi_turn else per_turn
    return TurnLimits(max_turns=ro.max_turns if ro.multi_turn else 1, max_new_tokens=per_turn,
                      max_observation_tokens=ro.max_observation_tokens,
                      observation_truncation=ro.observation_truncation, episode_tokens=episode,
                      turn_reward=ro.turn_reward)


def episode_seeds(seed: int, step: int, first_row: int, rows: int) -> list[int]:
    """A 63-bit seed per sample from (trainer seed, step, global row): the same on a resumed run."""
    def one(row: int) -> int:
        digest = hashlib.blake2b(f"{seed}:{step}:{row}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1

    return [one(first_row + i) for i in range(rows)]


def rollout(engine, tokenizer, agent, prompts: list, n: int, rollout_config, *, seeds: list[int] | None = None,
            max_new_tokens: int | None = None, **sampling):
    """The episodes of ``prompts`` (``n`` each) as one :class:`~steadyrl.rollout.base.Generation`;
    a ``rollout.agent`` runs them itself, through the gateway (:mod:`steadyrl.gateway`)."""
    if agent is not None and agent.drives_episodes:
        return agent.rollout(engine, tokenizer, prompts, n, turn_limits(rollout_config, max_new_tokens), seeds=seeds,
                             **sampling)
    return run_episodes(engine, tokenizer, prompts, n, agent=agent,
                        limits=turn_limits(rollout_config, max_new_tokens), seeds=seeds, **sampling)
