"""An agent rollout's episodes as the :class:`~steadyrl.rollout.base.Generation` the trainer trains on.

One row per episode: its trained chain (:mod:`.record`), prompt left-padded, everything after it
right-padded; ``policy_mask`` 1 on sampled ids only. An episode that failed (the agent raised, ran
out of time, returned something that is not a number or made no call) is a row marked failed: the
scorer makes it an invalid sample, so it stays out of the update.
"""

from __future__ import annotations

import math

import torch

from ..rollout.base import EpisodeInfo, Generation
from ..rollout.stepwise import TurnSample
from .record import EpisodeRecord


def trajectories(e: EpisodeRecord, episode_tokens: int) -> list[TurnSample]:
    """Every chain of the episode as a sample of its own (its prompt ids as the context, what came
    after as the response, trained where ``policy`` is 1), in the order they started; the trainer
    lays them out as the episode's samples when any episode of the step has more than one
    (:func:`steadyrl.trainer.turn_samples.needs_turn_samples`), all sharing its reward."""
    if e.failed:
        return []
    return [TurnSample(list(c.prompt_ids), c.ids[:episode_tokens], c.logprobs[:episode_tokens],
                       c.policy[:episode_tokens]) for c in e.chains]


def _info(e: EpisodeRecord, chain, truncation: str | None) -> EpisodeInfo:
    # turns: every call of the episode, whichever trajectory (chain) it extended
    info = EpisodeInfo(turns=e.calls if chain else 0, turn_ends=list(chain.turn_ends) if chain else [],
                       failed=e.failed, error=e.error, truncation=truncation, tool_calls=e.tool_calls,
                       observation_tokens=(len(chain.policy) - sum(chain.policy)) if chain else 0)
    first_user = next((i for i, m in enumerate(e.transcript) if m.get("role") == "user"), -1)
    info.messages = [dict(m) for m in e.transcript[first_user + 1:]]
    info.chat = [dict(m) for m in info.messages]
    info.gateway = True
    info.agent_reward = e.reward
    info.agent_calls, info.non_append_calls = e.calls, e.non_append_calls
    info.timed_out, info.off_policy_calls = e.timed_out, e.off_policy_calls
    info.call_failure = e.call_failure
    return info


def check_reward(value) -> tuple[float | None, str | None]:
    """``(reward, error)`` of what an agent returned: a real number, or None (the reward functions)."""
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            import numpy as np

            if isinstance(value, np.generic) and np.issubdtype(type(value), np.number):
                value = float(value)
            else:
                raise TypeError
        except (ImportError, TypeError):
            return None, f"the agent returned {type(value).__name__} {str(value)[:60]!r}; expected a number or None"
    if not math.isfinite(float(value)):
        return None, f"the agent returned {value!r}; expected a finite number or None"
    return float(value), None


def assemble(episodes: list[EpisodeRecord], tokenizer, episode_tokens: int, keep_logprobs: bool,
             split: bool = True) -> Generation:
    """One row per episode (module docstring); ``split``: each episode's trajectories as its samples
    too (:func:`trajectories`); False for a vision-language policy, whose turn samples would carry no
    image inputs: an episode that rewrote its history then trains its last trajectory only."""
    pad = tokenizer.pad_token_id
    chains = [e.chains[e.last_chain] if e.last_chain is not None else None for e in episodes]
    for e, chain in zip(episodes, chains):
        if chain is None and not e.failed:
            e.failed, e.error = True, "the agent made no call to the gateway"
    prompts = [c.prompt_ids if c else [pad] for c in chains]
    bodies = [(c.ids[:episode_tokens], c.policy[:episode_tokens], c.logprobs[:episode_tokens]) if c else ([], [], [])
              for c in chains]
    rows, width = len(episodes), max([1, *(len(b[0]) for b in bodies)])
    prompt_width = max(len(p) for p in prompts)
    prompt_ids = torch.full((rows, prompt_width), pad, dtype=torch.long)
    prompt_mask = torch.zeros((rows, prompt_width), dtype=torch.long)
    response_ids = torch.full((rows, width), pad, dtype=torch.long)
    response_mask = torch.zeros((rows, width), dtype=torch.long)
    policy_mask = torch.zeros((rows, width), dtype=torch.long)
    logprobs = torch.zeros((rows, width), dtype=torch.float32)
    infos, truncated = [], []
    for i, (e, chain, prompt, (ids, policy, lps)) in enumerate(zip(episodes, chains, prompts, bodies)):
        prompt_ids[i, prompt_width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        prompt_mask[i, prompt_width - len(prompt):] = 1
        if ids:
            response_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            response_mask[i, : len(ids)] = 1
            policy_mask[i, : len(ids)] = torch.tensor(policy, dtype=torch.long)
            logprobs[i, : len(ids)] = torch.tensor(lps, dtype=torch.float32)
        cut = chain is not None and len(chain.ids) > episode_tokens
        truncation = "max_episode_tokens" if cut else ("max_new_tokens" if chain and not chain.ended else None)
        infos.append(_info(e, chain, truncation))
        infos[-1].samples = trajectories(e, episode_tokens) if split else None
        truncated.append(truncation is not None)
    images = [c.image_inputs if c else None for c in chains]  # a VLM's: each row's images, its prompt's
    return Generation(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                      response_mask=response_mask, truncated=torch.tensor(truncated, dtype=torch.bool),
                      completions=tokenizer.batch_decode([b[0] for b in bodies], skip_special_tokens=True),
                      rollout_logprobs=logprobs if keep_logprobs else None, policy_mask=policy_mask, episodes=infos,
                      **({"image_inputs": images} if any(x is not None for x in images) else {}))
