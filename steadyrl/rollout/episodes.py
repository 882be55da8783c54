"""Episodes: a prompt, then policy turns and observations, one batched ``generate`` per turn.

    prompt | turn 1 (sampled) | observation 1 | turn 2 (sampled) | ... | turn K (sampled)

Token in, token out: an episode's tokens are exactly the ids the policy sampled plus the tokenized
observations. A turn's text is decoded only to read its tool calls (or to hand it to an
environment) and for the chat template to render what comes next; it is never re-encoded. An
observation is the template's rendering of the new messages alone
(:func:`steadyrl.agents.chat.observation_ids`): the rendering of the conversation with them minus
the rendering without them, starting right after the end-of-turn token the policy sampled.

The result is the :class:`~steadyrl.rollout.base.Generation` a single turn returns, with
``response_mask`` 1 over the turns *and* the observations (attended to) and ``policy_mask`` 1 over
the sampled tokens only (trained on). Without an agent (no tools, no environment) an episode is
one turn and the first turn's generation is returned as it is: the single-turn path is this one.

Each turn generates for the still-running episodes only; finished ones drop out. Limits:

* ``max_turns``: an episode that still calls a tool after its last allowed turn is truncated;
* ``max_new_tokens`` per turn: a turn without an end-of-turn token truncates the episode;
* ``max_episode_tokens`` over everything after the prompt: a turn is cut to what is left, and an
  observation that leaves no room for another turn ends the episode, truncated;
* ``max_observation_tokens``: the new messages' contents are shortened (``right``: keep the start,
  ``left``: keep the end) so the rendered observation fits; the template's own tokens are never
  cut, so messages whose rendering with empty contents does not fit end the episode, truncated
  (start-up checks that one message fits).

``rollout.multi_turn.mode`` (the agent's ``multi_turn_mode``, resolved at start-up): ``single`` is the
above; ``as_sampled`` the same sequence, each observation taken from the end of the template's
rendering whatever it does to earlier turns (:func:`~steadyrl.agents.chat.observation_tail_ids`);
``stepwise`` generates each later turn from the template's rendering of the conversation so far and
records each turn as a sample (:mod:`.stepwise`) beside the episode's row.

The transcript (``EpisodeInfo.messages``, the ``turns`` reward functions receive) holds every
sampled turn once, as an assistant message of the text sampled (the cut text of a cut turn, the
last turn of a truncated or failed episode included), and the observations the policy saw.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from ..agents.chat import TemplateError
from ..agents.images import ImageContentError
from ..agents.messages import text_message
from ..agents.turns import shape_turn
from .base import EpisodeInfo, Generation
from .episode_images import check_mode, generate_images, observation_images, processed, row_image_inputs, template_of
from .observations import ObservationRendering, observation
from .stepwise import step_context, stepwise_drift, turn_drift, turn_samples, written_history


@dataclass(frozen=True)
class TurnLimits:
    max_turns: int
    max_new_tokens: int
    max_observation_tokens: int
    observation_truncation: str
    episode_tokens: int
    turn_reward: str = "sum"


@dataclass
class _Episode:
    prompt_ids: list[int]
    history: list[dict] | None  # the conversation so far, for the chat template (None: no template)
    row: dict
    state: object = None
    ids: list[int] = field(default_factory=list)  # everything after the prompt
    policy: list[int] = field(default_factory=list)  # 1 where the policy sampled the token
    logprobs: list[float] = field(default_factory=list)
    contexts: list[list[int]] = field(default_factory=list)  # what each turn was generated from
    info: EpisodeInfo = field(default_factory=lambda: EpisodeInfo(turns=0))
    running: bool = True
    text: str = ""
    end: str | None = None  # the end-of-turn token the latest turn was closed with, as text
    starts: list[int] = field(default_factory=list)  # where each turn starts in ids
    marks: list[int] = field(default_factory=list)  # len(history) when each turn was sampled
    step_context: list[int] | None = None  # stepwise: the next turn's context (the template's rendering)
    images: list = field(default_factory=list)  # a VLM's: the prompt's images then the observations'
    image_chunks: list[dict] = field(default_factory=list)  # their image inputs, one dict per processor call


def run_episodes(engine, tokenizer, prompts: list, n: int, *, agent=None, limits: TurnLimits,
                 seeds: list[int] | None = None, processor=None, **sampling) -> Generation:
    """``n`` episodes of each prompt (rows in group order). ``prompts`` carry ``ids``, ``columns``,
    ``text``, ``messages`` (a chat-format record's prompt, or None) and ``conversation`` (the chat
    messages the template rendered, or None), and with a ``processor`` (a vision-language policy's)
    ``images`` and ``image_inputs`` (:mod:`.episode_images`); ``sampling``: temperature, top_p,
    top_k, do_sample, passed to every turn's ``generate``."""
    first_turn = min(limits.max_new_tokens, limits.episode_tokens)
    if agent is None:  # one turn: the episode is the first generation
        # PromptItem's (stand-ins may lack it), read once for the step: a dataset's are lazy (data/lazy_images.py)
        image_inputs = [_loaded(getattr(p, "image_inputs", None)) for p in prompts]
        if any(x is not None for x in image_inputs):  # a VLM's prompts: their images too (vLLM reads the PIL ones)
            sampling = {**sampling, "image_inputs": image_inputs,
                        "images": [tuple(getattr(p, "images", ()) or ()) for p in prompts]}
        return engine.generate([p.ids for p in prompts], n, max_new_tokens=first_turn, **sampling)
    mode = agent.multi_turn_mode
    check_mode(mode, processor)
    tokenizer = template_of(tokenizer, processor)  # a VLM's template may be its processor's alone
    episodes = [_Episode(list(p.ids), list(p.conversation) if p.conversation is not None else None,
                         {"prompt": p.messages if p.messages is not None else p.text, **p.columns})
                for p in prompts for _ in range(n)]
    if processor is not None:
        for i, e in enumerate(episodes):
            p = prompts[i // n]
            e.images, e.image_chunks = list(p.images), [p.image_inputs] if p.image_inputs is not None else []
    _start(agent, tokenizer, episodes, seeds or list(range(len(episodes))), processor)
    eos = set(engine.eos_ids)
    end_texts = [tokenizer.decode([i]) for i in sorted(eos)]
    rendering = ObservationRendering(tokenizer, agent, limits, end_texts, mode, processor)
    shared = all(e.prompt_ids == list(prompts[i // n].ids) for i, e in enumerate(episodes))
    # an engine that gives the GPU back after generating (vLLM's sleep mode) keeps it between turns
    awake = getattr(engine, "awake", contextlib.nullcontext)
    try:
        with awake():
            if shared:  # the prompts as they are: generation computes each once per group
                leads = episodes[::n]
                first = engine.generate([p.ids for p in prompts], n, max_new_tokens=first_turn, **sampling,
                                        **generate_images([e.image_chunks for e in leads], [e.images for e in leads]))
            else:
                first = engine.generate([e.prompt_ids for e in episodes], 1, max_new_tokens=first_turn, **sampling,
                                        **generate_images([e.image_chunks for e in episodes],
                                                          [e.images for e in episodes]))
            _record(episodes, list(range(len(episodes))), first, limits, eos, tokenizer)
            while True:
                running = [i for i, e in enumerate(episodes) if e.running]
                if not running:
                    break
                _respond(rendering, [episodes[i] for i in running])
                running = [i for i in running if episodes[i].running]
                if not running:
                    break
                budget = max(min(limits.max_new_tokens, _left(episodes[i], limits)) for i in running)
                gen = engine.generate([next_context(episodes[i]) for i in running], 1,
                                      max_new_tokens=budget, **sampling,
                                      **generate_images([episodes[i].image_chunks for i in running],
                                                        [episodes[i].images for i in running]))
                _record(episodes, running, gen, limits, eos, tokenizer)
    finally:
        agent.close([e.state for e in episodes])
    for e in episodes:
        e.info.drift_tokens += (_template_drift(tokenizer, e, agent, processor) if mode == "single" else
                                stepwise_drift(tokenizer, e, agent) + turn_drift(tokenizer, e, agent) if mode == "stepwise"
                                else 0)
    return _assemble(first, episodes, tokenizer, limits, mode)


def _loaded(image_inputs) -> dict | None:
    """A prompt's image tensors as a plain dict for this step (a lazy one is read and processed now)."""
    return None if image_inputs is None else dict(image_inputs)


def next_context(e: _Episode) -> list[int]:
    """What the episode's next turn is generated from: the episode so far (one sequence), or in
    step-wise mode the template's rendering of the conversation so far."""
    return e.step_context if e.step_context is not None else e.prompt_ids + e.ids


def _template_drift(tokenizer, e: _Episode, agent, processor=None) -> int:
    """Tokens of the episode that differ from the tokenized ``apply_chat_template`` of its whole
    conversation as the model wrote it (:func:`.stepwise.written_history`, the last turn as sampled); the last end token is the
    policy's and not compared. 0 when there is no template or it cannot render the conversation.
    An episode with images is tokenized by the processor with all of them (placeholders expanded)."""
    from ..agents.chat import render

    if e.history is None or e.info.failed:
        return 0
    try:  # the last turn as the template holds it (its reasoning, its content without the template's markers)
        last = shape_turn(tokenizer, e.history, e.text, text_message(e.text, getattr(tokenizer, "chat_template", None)),
                          tools=agent.tool_schemas, template_kwargs=agent.template_kwargs, end=e.end)
        text = render(tokenizer, written_history(tokenizer, e, agent) + [last], tools=agent.tool_schemas,
                      add_generation_prompt=False, template_kwargs=agent.template_kwargs)
    except TemplateError:
        return 0
    sequence = e.prompt_ids + (e.ids[:-1] if e.end is not None else e.ids)
    try:
        reference = (processed(processor, text, e.images)[0] if e.images else
                     tokenizer(text, add_special_tokens=False)["input_ids"])
    except ValueError:  # the rendering's image placeholders are not the episode's images: none of it holds
        return len(sequence)
    return sum(a != b for a, b in zip(sequence, reference)) + max(len(sequence) - len(reference), 0)


def _left(e: _Episode, limits: TurnLimits) -> int:
    return limits.episode_tokens - len(e.ids)


def _start(agent, tokenizer, episodes: list[_Episode], seeds: list[int], processor=None) -> None:
    from ..agents.chat import render

    starts = agent.start([e.row for e in episodes], seeds)
    for e, s in zip(episodes, starts):
        e.state = s.state
        e.info.env_time_s += s.elapsed_s
        if s.failed:
            e.info.failed, e.info.error = True, s.error
        elif s.messages is not None:  # the environment's first observation replaces the row's prompt
            try:
                e.history, images = observation_images(list(s.messages), agent, processor, 0)
            except ImageContentError as err:
                e.info.failed, e.info.error, e.history = True, f"reset: {err}", None
                continue
            text = render(tokenizer, e.history, tools=agent.tool_schemas, add_generation_prompt=True,
                          purpose="the environment's first observation", template_kwargs=agent.template_kwargs)
            e.images, e.image_chunks = images, []  # the row's images go with its prompt
            if images:
                e.prompt_ids, chunk = processed(processor, text, images)
                e.image_chunks.append(chunk)
            else:
                e.prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]


def _record(episodes: list[_Episode], rows: list[int], gen: Generation, limits: TurnLimits, eos: set[int],
            tokenizer) -> None:
    """Append each row's sampled turn to its episode and decide whether the episode goes on."""
    for j, i in enumerate(rows):
        e = episodes[i]
        context = gen.prompt_ids[j][gen.prompt_mask[j].bool()].tolist()
        e.contexts.append(context)
        e.starts.append(len(e.ids))
        e.marks.append(len(e.history) if e.history is not None else 0)
        valid = gen.response_mask[j].bool()
        ids = gen.response_ids[j][valid].tolist()
        logprobs = gen.rollout_logprobs[j][valid].tolist() if gen.rollout_logprobs is not None else [0.0] * len(ids)
        left = _left(e, limits)
        ids, logprobs = ids[:left], logprobs[:left]
        e.info.turn_ends.append(len(e.ids) + len(ids) - 1)
        e.ids += ids
        e.policy += [1] * len(ids)
        e.logprobs += logprobs
        e.info.turns += 1
        ended = bool(ids) and ids[-1] in eos
        e.text = tokenizer.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
        e.end = tokenizer.decode(ids[-1:], skip_special_tokens=False) if ended else None
        if not ended:  # the episode's budget was the turn's limit when it used all of it
            e.info.truncation = "max_episode_tokens" if len(ids) >= left else "max_new_tokens"
            e.running = False
        elif e.info.failed:
            e.running = False
        if not e.running:  # no reply to append it: the transcript gets the (cut) turn here
            e.info.messages.append({"role": "assistant", "content": e.text})
            e.info.chat.append({"role": "assistant", "content": e.text})


def _respond(r: ObservationRendering, episodes: list[_Episode]) -> None:
    """The agent's replies to the latest turns, appended as observation tokens."""
    agent, tokenizer, limits, processor = r.agent, r.tokenizer, r.limits, r.processor
    last = [e.info.turns >= limits.max_turns for e in episodes]  # a tool call then could never be read
    replies = agent.respond([e.state for e in episodes], [e.text for e in episodes], last)
    for e, reply in zip(episodes, replies):
        info = e.info
        info.env_time_s += reply.elapsed_s
        info.tool_calls += reply.tool_calls
        for name, count in reply.tool_errors.items():
            info.tool_errors[name] = info.tool_errors.get(name, 0) + count
        info.turn_rewards.append(reply.reward)
        assistant = {"role": "assistant", "content": e.text}
        info.messages.append(assistant)  # the transcript: the text sampled; the conversation: the parsed turn
        kept = reply.assistant or text_message(e.text, getattr(tokenizer, "chat_template", None))
        if e.history is not None:  # the template's own fields: reasoning, content without its markers
            kept = shape_turn(tokenizer, e.history, e.text, kept, tools=agent.tool_schemas,
                              template_kwargs=agent.template_kwargs, end=e.end)
        info.chat.append(dict(kept))
        if reply.failed:
            info.failed, info.error, e.running = True, reply.error, False
            continue
        if reply.done:
            e.running = False
            continue
        if info.turns >= limits.max_turns:  # not done after its last turn
            info.truncation, e.running = "max_turns", False
            continue
        if not reply.messages:  # nothing to say: the episode ends
            e.running = False
            continue
        try:  # images: decoded and checked; a text policy raises (ConfigError), never drops them
            reply.messages, images = observation_images(reply.messages, agent, processor, len(e.images))
            obs, chunk = observation(r, e, kept, reply.messages, images)
        except (TemplateError, ImageContentError) as err:  # a template behaviour the probe did not see,
            info.failed, info.error, e.running = True, str(err), False  # an unreadable image: this episode only
            continue
        if obs is None:  # the template's own tokens for these messages exceed the limit
            info.truncation, e.running = "max_observation_tokens", False
            continue
        if len(e.ids) + len(obs) + 1 > limits.episode_tokens:  # no room for another turn
            info.truncation, e.running = "max_episode_tokens", False
            continue
        info.messages.extend(reply.messages)  # the transcript holds what the policy saw
        info.chat.extend(dict(m) for m in reply.messages)
        if e.history is not None:
            e.history += [kept, *reply.messages]
        e.ids += obs
        if chunk is not None:
            e.images += images
            e.image_chunks.append(chunk)
        e.policy += [0] * len(obs)
        e.logprobs += [0.0] * len(obs)
        info.observation_tokens += len(obs)
        if r.mode == "stepwise" and e.history is not None:
            e.step_context = step_context(tokenizer, e.history, agent)


def _combine(rewards: list[float | None], how: str) -> float | None:
    given = [r for r in rewards if r is not None]
    if not given:
        return None
    return float(sum(given)) if how == "sum" else (rewards[-1] if rewards[-1] is not None else None)


def _assemble(first: Generation, episodes: list[_Episode], tokenizer, limits: TurnLimits,
              mode: str = "single") -> Generation:
    """One :class:`Generation` of the episodes: prompts left-padded, everything after them right-padded."""
    pad = tokenizer.pad_token_id
    width = max([first.response_ids.shape[1], *(len(e.ids) for e in episodes)])
    prompt_width = max(len(e.prompt_ids) for e in episodes)
    rows = len(episodes)
    prompt_ids = torch.full((rows, prompt_width), pad, dtype=torch.long)
    prompt_mask = torch.zeros((rows, prompt_width), dtype=torch.long)
    response_ids = torch.full((rows, width), pad, dtype=torch.long)
    response_mask = torch.zeros((rows, width), dtype=torch.long)
    policy_mask = torch.zeros((rows, width), dtype=torch.long)
    logprobs = torch.zeros((rows, width), dtype=torch.float32) if first.rollout_logprobs is not None else None
    for i, e in enumerate(episodes):
        p, r = len(e.prompt_ids), len(e.ids)
        prompt_ids[i, prompt_width - p:] = torch.tensor(e.prompt_ids, dtype=torch.long)
        prompt_mask[i, prompt_width - p:] = 1
        response_ids[i, :r] = torch.tensor(e.ids, dtype=torch.long)
        response_mask[i, :r] = 1
        policy_mask[i, :r] = torch.tensor(e.policy, dtype=torch.long)
        if logprobs is not None:
            logprobs[i, :r] = torch.tensor(e.logprobs)
        sequence = e.prompt_ids + e.ids
        if mode == "stepwise":  # each turn is a sample of its own: the context it was sampled from
            e.info.samples = turn_samples(e)
        else:  # one sequence: every turn was sampled from a prefix of it
            e.info.drift_tokens += sum(sum(a != b for a, b in zip(c, sequence)) + max(len(c) - len(sequence), 0)
                                       for c in e.contexts)
        e.info.env_reward = _combine(e.info.turn_rewards, limits.turn_reward)
    image_inputs = row_image_inputs([e.image_chunks for e in episodes])
    return Generation(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids, response_mask=response_mask,
        truncated=torch.tensor([e.info.truncation is not None for e in episodes]),
        completions=tokenizer.batch_decode([e.ids for e in episodes], skip_special_tokens=True),
        rollout_logprobs=logprobs, policy_mask=policy_mask, episodes=[e.info for e in episodes],
        **({} if image_inputs is None else {"image_inputs": image_inputs}))


def episode_metrics(episodes: list[EpisodeInfo] | None, tool_names: list[str] = ()) -> dict[str, float]:
    """``rollout/*`` metrics of a step's episodes (empty for single-turn steps)."""
    if not episodes:
        return {}
    n = len(episodes)
    turns = [e.turns for e in episodes]
    errors: dict[str, int] = {name: 0 for name in tool_names}
    for e in episodes:
        for name, count in e.tool_errors.items():
            errors[name] = errors.get(name, 0) + count
    metrics = {
        "rollout/turns_mean": sum(turns) / n,
        "rollout/turns_max": float(max(turns)),
        "rollout/tool_calls": float(sum(e.tool_calls for e in episodes)),
        "rollout/tool_calls_per_episode": sum(e.tool_calls for e in episodes) / n,
        "rollout/tool_errors": float(sum(errors.values())),
        "rollout/observation_tokens_mean": sum(e.observation_tokens for e in episodes) / n,
        "rollout/env_time_s": sum(e.env_time_s for e in episodes),
        "rollout/failed_episodes": float(sum(e.failed for e in episodes)),
        "rollout/failed_episode_frac": sum(e.failed for e in episodes) / n,
        "rollout/retokenize_drift": float(sum(e.drift_tokens for e in episodes)),
    }
    for name, count in sorted(errors.items()):
        metrics[f"rollout/tool_errors/{name}"] = float(count)
    for reason in ("max_new_tokens", "max_episode_tokens", "max_observation_tokens", "max_turns"):
        metrics[f"rollout/truncated/{reason}"] = float(sum(e.truncation == reason for e in episodes))
    if any(e.gateway for e in episodes):  # rollout.multi_turn.agent episodes (steadyrl.gateway)
        metrics.update({
            "rollout/agent/calls": float(sum(e.agent_calls for e in episodes)),
            "rollout/agent/non_append_calls": float(sum(e.non_append_calls for e in episodes)),
            "rollout/agent/off_policy_calls": float(sum(e.off_policy_calls for e in episodes)),
            "rollout/agent/timeouts": float(sum(e.timed_out for e in episodes)),
            "rollout/agent/errors": float(sum(e.failed and not e.timed_out for e in episodes)),
            "rollout/agent/gateway_errors": float(sum(e.call_failure is not None for e in episodes)),
        })
    return metrics


def turn_reward_tensor(episodes: list[EpisodeInfo] | None, width: int, how: str) -> torch.Tensor | None:
    """``[B, width]`` float64: each earlier turn's environment reward at that turn's last token
    (GAE then sees it where it was earned); the last turn's is part of the episode's score. None
    when no episode has one, or when only the last turn counts (``turn_reward: last``)."""
    if not episodes or how != "sum":
        return None
    out = torch.zeros((len(episodes), width), dtype=torch.float64)
    for i, e in enumerate(episodes):
        for end, reward in zip(e.turn_ends[:-1], e.turn_rewards[: len(e.turn_ends) - 1]):
            if reward is not None and 0 <= end < width:
                out[i, end] = reward
    return out if bool(out.any()) else None
