"""The trainer's side of multi-turn episodes: building the agent, rolling out, scoring transcripts.

* :func:`build_agent` loads ``rollout.tools`` (and ``rollout.tool_parser``) or
  ``rollout.environment`` and checks the chat template can carry them, before any model loads;
* :func:`rollout` runs a step's (or an evaluation's) episodes through
  :func:`steadyrl.rollout.episodes.run_episodes` — one turn when there is no agent;
* :func:`score_episodes` calls the reward functions on the whole transcripts (they also receive
  the turn list as the keyword ``turns``) and adds the environment's episode reward, logged as the
  reward ``environment``; an episode whose environment failed is an invalid sample.

Environment instances are seeded from ``trainer.seed``, the step and the sample's global index
(:func:`episode_seeds`), so a resumed run replays the same episodes.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import torch

from ..rewards.scoring import FAILURE_KINDS, ScoreResult
from ..rollout.base import eos_token_ids
from ..rollout.episodes import TurnLimits, run_episodes
from .prompts import completion_token_ids

ENVIRONMENT_REWARD = "environment"
"""The name the environment's episode reward is logged (``reward/environment/mean``) and chosen by."""


def build_agent(config, tokenizer):
    """The agent of ``config.rollout`` (None for single-turn runs), its tools and template checked."""
    ro = config.rollout
    if not ro.multi_turn:
        return None
    from ..agents.chat import check_observation_room, check_template

    isolation = ro.tool_isolation or _default_isolation()
    if ro.tools:
        from ..agents.parsers import load_parser
        from ..agents.toolagent import ToolAgent
        from ..agents.tools import load_tools

        agent = ToolAgent(load_tools(list(ro.tools)), load_parser(ro.tool_parser), timeout_s=ro.tool_timeout_s,
                          isolation=isolation, limits=ro.tool_limits, workers=ro.tool_workers,
                          max_calls_per_turn=ro.max_tool_calls_per_turn, time_budget_s=ro.tool_time_budget_s)
    else:
        from ..agents.environment import EnvironmentAgent, load_environment

        agent = EnvironmentAgent(load_environment(ro.environment), observation_role=ro.observation_role,
                                 timeout_s=ro.tool_timeout_s, isolation=isolation, limits=ro.tool_limits)
    agent.template_kwargs = dict(config.data.chat_template_kwargs)
    end_texts = [tokenizer.decode([i]) for i in eos_token_ids(tokenizer)]
    check_template(tokenizer, tools=agent.tool_schemas, observation_role=agent.observation_role,
                   end_texts=end_texts, template_kwargs=agent.template_kwargs)
    check_observation_room(tokenizer, ro.max_observation_tokens, tools=agent.tool_schemas,
                           observation_role=agent.observation_role, end_texts=end_texts,
                           template_kwargs=agent.template_kwargs)
    return agent


def _default_isolation() -> str:
    from ..rewards.runners import default_isolation

    return default_isolation()


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
    """The episodes of ``prompts`` (``n`` each) as one :class:`~steadyrl.rollout.base.Generation`."""
    return run_episodes(engine, tokenizer, prompts, n, agent=agent,
                        limits=turn_limits(rollout_config, max_new_tokens), seeds=seeds, **sampling)


def score_episodes(scorer, samples: list, gen, *, environment: bool) -> ScoreResult:
    """Reward functions on the transcripts, plus the environment's reward when there is one."""
    extra = {"turns": [e.messages for e in gen.episodes]} if gen.episodes else None
    ids = completion_token_ids(gen.response_ids, gen.response_mask)  # the whole transcript's tokens
    result = scorer(samples, gen.completions, ids, extra_columns=extra)
    if not gen.episodes:
        return result
    if environment:
        return _with_environment(result, gen.episodes)
    return _without_failed(result, gen.episodes)


def _without_failed(result: ScoreResult, episodes) -> ScoreResult:
    """Episodes that could not be completed (a chat template that failed mid-episode) are invalid."""
    failed = torch.tensor([e.failed for e in episodes], dtype=torch.bool)
    if not bool(failed.any()):
        return result
    errors = {**result.errors, "episode": next(e.error for e in episodes if e.failed)}
    valid = result.valid & ~failed
    return replace(result, valid=valid, scores=torch.where(valid, result.scores, torch.zeros_like(result.scores)),
                   errors=errors)


def _with_environment(result: ScoreResult, episodes) -> ScoreResult:
    failed = [e.failed for e in episodes]
    raw = [None if f else (e.env_reward if e.env_reward is not None else 0.0) for e, f in zip(episodes, failed)]
    env = torch.tensor([0.0 if x is None else x for x in raw], dtype=torch.float64)
    valid = result.valid & ~torch.tensor(failed, dtype=torch.bool)
    failures = dict.fromkeys(FAILURE_KINDS, 0)
    failures["exception"] = sum(failed)
    errors = dict(result.errors)
    first_error = next((e.error for e in episodes if e.failed and e.error), None)
    if first_error:
        errors[ENVIRONMENT_REWARD] = first_error
    return ScoreResult(
        names=[*result.names, ENVIRONMENT_REWARD],
        weights={**result.weights, ENVIRONMENT_REWARD: 1.0},
        raw={**result.raw, ENVIRONMENT_REWARD: raw},
        scores=torch.where(valid, result.scores + env, torch.zeros_like(env)),
        valid=valid,
        failures={**result.failures, ENVIRONMENT_REWARD: failures},
        errors=errors,
        elapsed_s={**result.elapsed_s, ENVIRONMENT_REWARD: sum(e.env_time_s for e in episodes)},
        domains=result.domains,  # the environment's reward applies to every domain
        routes=result.routes,
    )
