"""The scorer a run calls: the reward functions on completions of prompts, and on whole episodes.

* :class:`Scorer` wraps :class:`~steadyrl.rewards.scoring.RewardScorer` for
  :class:`~steadyrl.data.prompts.PromptItem` s (their text, their columns as keyword lists, their
  chat messages), keeping the reward functions' worker processes for the whole run;
* :func:`dry_call`: before step 1 on chat data, a TRL function ``def f(prompts, completions, ...)``
  of your own that fails on text as if it expected TRL's message lists is called TRL's way from
  then on (a note says so); one that fails on both stops the run (exit 2) naming its exception;
* :func:`score_episodes` calls it on a :class:`~steadyrl.rollout.base.Generation`'s transcripts
  (the reward functions also receive the turn list as the keyword ``turns``) and adds the
  environment's episode reward, logged as the reward ``environment``; an episode whose
  environment failed is an invalid sample.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..errors import DataError, RewardCallError
from .calling import PlannedReward, describe_call, looks_like_chat_shape_error
from .scoring import FAILURE_KINDS, RewardScorer, RewardSpec, ScoreResult, score_batch

ENVIRONMENT_REWARD = "environment"
"""The name the environment's episode reward is logged (``reward/environment/mean``) and chosen by."""
AGENT_REWARD = "agent"
"""The name a ``rollout.multi_turn.agent``'s returned rewards are logged (``reward/agent/mean``) and chosen by."""


def completion_token_ids(response_ids, response_mask) -> list[list[int]]:
    """Each row's valid response token ids (EOS included) as a list of ints: ``completion_ids``."""
    return [row[mask.bool()].tolist() for row, mask in zip(response_ids, response_mask)]


class Scorer:
    """Calls the reward functions on completions of :class:`PromptItem` s, keeping their worker
    processes for the whole run (:meth:`close` stops them). With ``allow_empty`` (an environment
    gives the rewards) there may be no reward function: every sample then scores 0, valid.

    The first batch it scores is also a check of how the functions are called: a function whose
    signature cannot take the call (every sample failed with a binding ``TypeError``) stops the
    run there with a :class:`~steadyrl.errors.RewardCallError` (exit status 2), instead of
    failing every sample of every step. With ``domain_key`` each reward scores only the rows of its
    domains (``RewardSpec.domains``)."""

    def __init__(self, specs: list[RewardSpec], *, allow_empty: bool = False, domain_key: str | None = None,
                 probe: dict | None = None, say=print, agent_fallback: bool = False):
        if not specs and not allow_empty:
            raise DataError("no reward function configured (rewards: [])")
        if probe is not None:
            specs = dry_call(specs, probe, domain_key=domain_key, say=say)
        self._scorer = RewardScorer(specs, domain_key=domain_key) if specs else None
        self.names = [s.name for s in specs]
        self._first = True
        # the functions score only the episodes whose rollout.multi_turn.agent returned None (the demo's default
        # reward): an agent's number is then the score alone, as with rewards: [] on a data task
        self.agent_fallback = agent_fallback

    def __call__(self, prompts: list[PromptItem], completions: list[str],
                 completion_ids: list[list[int]] | None = None, extra_columns: dict | None = None,
                 chat_completions: list | None = None) -> ScoreResult:
        if self._scorer is None:
            n = len(completions)
            return ScoreResult(names=[], weights={}, raw={}, scores=torch.zeros(n, dtype=torch.float64),
                               valid=torch.ones(n, dtype=torch.bool), failures={})
        keys = sorted({k for p in prompts for k in p.columns})
        columns = {k: [p.columns.get(k) for p in prompts] for k in keys}
        columns.update(extra_columns or {})
        chat = [p.messages for p in prompts]
        result = self._scorer.score([p.text for p in prompts], completions, columns, completion_ids=completion_ids,
                                    chat_prompts=chat if any(m is not None for m in chat) else None,
                                    chat_completions=chat_completions)
        first, self._first = self._first, False
        if first and result.call_errors:
            name, text = next(iter(result.call_errors.items()))
            raise RewardCallError(
                f"rewards: {name!r} cannot be called as {text}; every sample of the first batch failed "
                f"with it (the columns passed: {keys}). Fix the function's signature or the data "
                "(docs/rewards.md, 'How a function is called')")
        return result

    def close(self) -> None:
        if self._scorer is not None:
            self._scorer.close()


DRY_COMPLETION = "0"
"""The completion of the dry call before step 1 (a short answer; TRL-style code that expects a
message list fails on it as it would on any text)."""


def exception_line(error: str) -> str:
    """``ValueError: bad reward`` out of a failure's text (a traceback, maybe with a note after it)."""
    lines = [line for line in error.split("\n") if line.strip()]
    last = [line for line in lines if not line[0].isspace() and not line.startswith(("Traceback", "note:"))]
    return (last[-1] if last else error.strip())[:500]


def _probe_batch(record: dict) -> tuple[list, list, dict, list | None]:
    prompt = record.get("prompt")
    chat = prompt if isinstance(prompt, list) else None
    text = prompt if isinstance(prompt, str) else "\n".join(
        str(m.get("content", "")) for m in (chat or []) if isinstance(m, dict))
    columns = {k: [v] for k, v in record.items() if k != "prompt"}
    return [text], [DRY_COMPLETION], columns, [chat] if chat is not None else None


def dry_call(specs: list[RewardSpec], record: dict, *, domain_key: str | None = None, say=print) -> list[RewardSpec]:
    """On chat data (``record``, the first data row, has a message-list prompt): each reward function
    of your own (``module:function`` / ``file.py:function``) that steadyrl calls its own way (text,
    positionally) is called once on ``record`` with the completion :data:`DRY_COMPLETION`. One that
    fails on text as TRL code does (``c[0]["content"]`` on a str) but runs on TRL's message lists is
    switched to TRL's call (a note says so); one that fails both ways raises
    :class:`RewardCallError` (exit 2) naming it and its exception; another exception is said as a
    warning (it may be the placeholder's). Text data, built-ins and TRL-style functions are not
    called: nothing changes for them."""
    from .loader import RECIPE_ATTR, load_reward

    prompts, completions, columns, chat = _probe_batch(record)
    if chat is None:
        return list(specs)

    def once(spec: RewardSpec) -> ScoreResult:
        return score_batch([spec], prompts, completions, columns, chat_prompts=chat, completion_ids=[[0]],
                           domain_key=domain_key)

    out = []
    for spec in specs:
        recipe = getattr(spec.fn, RECIPE_ATTR, None)
        if recipe is None or ":" not in recipe[0] or "call_style" in recipe[1] \
                or PlannedReward.of(spec.fn).plan.style != "positional":
            out.append(spec)
            continue
        result = once(spec)
        error = result.errors.get(spec.name, "")
        if not result.failures[spec.name]["exception"] or spec.name in result.call_errors:
            out.append(spec)  # a call its signature cannot take: the first batch says so, as always
            continue
        call = describe_call(spec.fn, prompts, completions, columns)
        what = (f"rewards: {spec.name!r} raised {exception_line(error)} on a dry call before step 1 (the first "
                f"data row, completion {DRY_COMPLETION!r}, called as {call})")
        if not looks_like_chat_shape_error(error):
            say(f"warning: {what}; check it scores such a completion (0.0 or None), not raises")
            out.append(spec)
            continue
        trl = replace(spec, fn=load_reward(recipe[0], call_style="trl", **recipe[1]))
        again = once(trl)
        if again.failures[spec.name]["exception"]:
            raise RewardCallError(f"{what}, and raised {exception_line(again.errors.get(spec.name, ''))} when called "
                                  "TRL's way (message lists): it would fail every sample of the run:\n" + error)
        say(f"note: rewards: {spec.name!r} fails on text but runs on chat messages: steadyrl calls it TRL's way "
            "(prompts[i] the prompt's message list, completions[i] [{'role': 'assistant', 'content': text}]; "
            "docs/rewards.md, 'How a function is called')")
        out.append(trl)
    return out


def score_episodes(scorer, samples: list, gen, *, environment: bool) -> ScoreResult:
    """Reward functions on the transcripts, plus the environment's reward when there is one."""
    extra = {"turns": [e.messages for e in gen.episodes]} if gen.episodes else None
    ids = completion_token_ids(gen.response_ids, gen.response_mask)  # the whole transcript's tokens
    # a TRL-style reward gets, as TRL's tool loop gives it, the messages after the prompt
    chat = [e.chat or None for e in gen.episodes] if gen.episodes else None
    result = scorer(samples, gen.completions, ids, extra_columns=extra, chat_completions=chat)
    if not gen.episodes:
        return result
    if any(e.gateway for e in gen.episodes):
        return _with_agent(result, gen.episodes, fallback=getattr(scorer, "agent_fallback", False))
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
        declined=result.declined,
    )


def _with_agent(result: ScoreResult, episodes, *, fallback: bool = False) -> ScoreResult:
    """``rollout.multi_turn.agent`` episodes: the reward the agent returned is added to the reward functions'
    score (as an environment's is; with ``rewards: []`` it is the score); an agent that returned
    None leaves the score to the reward functions (invalid when there are none); a failed episode
    (the agent raised, timed out, returned something else) is invalid. With ``fallback`` (the demo's
    own reward, no ``rewards:`` written) the functions score only the episodes whose agent returned
    None: an agent's number is the score alone."""
    failed = torch.tensor([e.failed for e in episodes], dtype=torch.bool)
    given = torch.tensor([e.agent_reward is not None for e in episodes], dtype=torch.bool)
    returned = torch.tensor([e.agent_reward or 0.0 for e in episodes], dtype=torch.float64)
    functions = bool(result.names)
    valid = ~failed & (result.valid if functions else given)
    if fallback and functions:
        valid = ~failed & (given | result.valid)
    errors = dict(result.errors)
    first_error = next((e.error for e in episodes if e.failed and e.error), None)
    if first_error:
        errors[AGENT_REWARD] = first_error
    elif not functions and bool((~given & ~failed).any()):
        errors[AGENT_REWARD] = "the agent returned None and no reward function is configured (rewards: [])"
    failures = dict.fromkeys(FAILURE_KINDS, 0)
    failures["exception"] = int(failed.sum())
    failures["none"] = 0 if functions else int((~given & ~failed).sum())
    raw = [r if g and not f else None for f, g, r in zip(failed.tolist(), given.tolist(), returned.tolist())]
    return ScoreResult(
        names=[*result.names, AGENT_REWARD],
        weights={**result.weights, AGENT_REWARD: 1.0},
        raw={**result.raw, AGENT_REWARD: raw},
        scores=torch.where(valid, torch.where(given, returned, result.scores) if fallback and functions
                           else result.scores + returned, torch.zeros_like(returned)),
        valid=valid,
        failures={**result.failures, AGENT_REWARD: failures},
        errors=errors,
        elapsed_s={**result.elapsed_s, AGENT_REWARD: 0.0},
        domains=result.domains,
        routes=result.routes,
        declined=result.declined,
    )
