"""Step-wise samples: an episode whose turns are trained one sample each (``rollout.multi_turn.mode: stepwise``).

A thinking template (Qwen3, QwQ, DeepSeek-R1, GLM ...) renders earlier assistant turns without their
reasoning, so an episode is not one sequence the template would render. In step-wise mode each turn
``k`` is generated from, and trained on, exactly what the model sees at inference::

    context_k = tokenize(apply_chat_template(history_k, add_generation_prompt=True))
    sample_k  = context_k + sampled_k            (trained on sampled_k only)

where ``history_k`` is the conversation before turn ``k`` (the prompt, the earlier turns as the
rollout keeps them, with their reasoning, which the template drops or keeps as it does, and the
observations). The first turn's context is the prompt as the run rendered it.

The samples of one episode share its reward (the episode's score) and its episode: the trainer
lays them out in ``slots`` rows per episode (:func:`split_episodes`), so a group of ``n`` episodes
becomes ``n * slots`` rows; a slot past an episode's last turn is an empty row (no token, no
sample). :class:`TurnSample` and :func:`samples_generation` are the reusable part: any driver that
records (context ids, sampled ids) per model call (an OpenAI-compatible gateway) builds the same
rows from its own records.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .base import Generation


@dataclass(frozen=True)
class TurnSample:
    """One model call of an episode: the ids it was given and the ids it sampled."""

    context: list[int]  # the template's rendering of the history at that call (what the model saw)
    ids: list[int]  # the sampled ids (trained on), its end token included when it ended
    logprobs: list[float] | None = None  # the engine's log-probs of ``ids`` (None: not returned)
    policy: list[int] | None = None  # 1 on the ids trained on (None: all of them); a gateway trajectory
    # that several calls extended holds the observations between them, attended to, not trained


def step_context(tokenizer, history: list[dict], agent) -> list[int]:
    """The next turn's context in step-wise mode: the template's rendering of ``history`` with a
    generation prompt, tokenized as a whole (what inference would feed the model)."""
    from ..agents.chat import render

    text = render(tokenizer, history, tools=agent.tool_schemas, add_generation_prompt=True,
                  purpose="the conversation before a turn", template_kwargs=agent.template_kwargs)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def written_history(tokenizer, e, agent) -> list[dict]:
    """The episode's conversation as the model wrote it (docs/agents.md, "Token truth"): each kept
    turn of a ``<think>`` family replaced by the server's message of its sampled text
    (:func:`steadyrl.agents.turns.written_turn`: reasoning split at ``</think>``, content as the
    parsers return it, the kept calls), whatever the rollout kept; other turns as kept."""
    from ..agents.turns import written_turn

    history = list(e.history)
    for k, (start, mark) in enumerate(zip(e.starts, e.marks)):
        if mark >= len(history) or history[mark].get("role") != "assistant" or k >= len(e.info.turn_ends):
            continue
        ids = e.ids[start:e.info.turn_ends[k] + 1]  # a kept turn ended with its end token
        text = tokenizer.decode(ids[:-1], skip_special_tokens=False)
        written = written_turn(tokenizer, history[:mark], text, history[mark].get("tool_calls"),
                               tools=agent.tool_schemas, template_kwargs=agent.template_kwargs)
        if written is not None:
            history[mark] = {**{key: v for key, v in history[mark].items() if key not in (
                "content", "reasoning_content", "tool_calls")}, **written}
    return history


def stepwise_drift(tokenizer, e, agent) -> int:
    """Tokens of the contexts the engine was given (read back from its generations) that differ
    from the template's rendering of the conversation as the model wrote it at that turn
    (:func:`written_history`, re-rendered now; turns after the first, the first is the run's prompt).
    0 when the samples are what inference would have shown the model::

        drift = sum_k  #{i : context_k[i] != truth_k[i]} + |len(context_k) - len(truth_k)|
    """
    from ..agents.chat import TemplateError

    if e.history is None or e.info.failed:
        return 0
    history = written_history(tokenizer, e, agent)
    drift = 0
    for context, mark in list(zip(e.contexts, e.marks))[1:]:
        try:
            reference = step_context(tokenizer, history[:mark], agent)
        except TemplateError:
            return 0
        drift += sum(a != b for a, b in zip(context, reference)) + abs(len(context) - len(reference))
    return drift


def turn_drift(tokenizer, e, agent) -> int:
    """Sampled tokens of the turns the conversation does not hold as sampled: a turn whose kept
    message (``e.history[mark]``) the template renders otherwise than the model wrote it (its raw
    text wrapped in the template's markers a second time, its reasoning in the wrong place) while a
    reading of it renders as written counts all its tokens; a template that drops only the turn's
    reasoning counts none. The step-wise
    contexts are renderings of that conversation, so this is where they would be silently wrong."""
    from ..agents.turns import served, shape_turn, turn_renders

    if e.history is None or e.info.failed:
        return 0
    drift = 0
    for k, (start, mark) in enumerate(zip(e.starts, e.marks)):
        if mark >= len(e.history) or e.history[mark].get("role") != "assistant":
            continue  # the last turn: the conversation does not go on with it
        ids = e.ids[start:e.info.turn_ends[k] + 1]  # a kept turn ended with its end token
        text = tokenizer.decode(ids[:-1], skip_special_tokens=False)
        end = tokenizer.decode(ids[-1:], skip_special_tokens=False)
        kw = {"tools": agent.tool_schemas, "template_kwargs": agent.template_kwargs, "end": end}
        if turn_renders(tokenizer, e.history[:mark], text, e.history[mark], **kw) or served(
                tokenizer, e.history[:mark], text, e.history[mark], agent.tool_schemas, agent.template_kwargs):
            continue  # as written, or as the server holds it (the truth, whatever the template makes of it)
        # a turn no reading renders as written (a malformed one) is held as a reasoning parser reads it: 0
        faithful = shape_turn(tokenizer, e.history[:mark], text, {"role": "assistant", "content": text}, **kw)
        if turn_renders(tokenizer, e.history[:mark], text, faithful, **kw):
            drift += len(ids)
    return drift


def turn_samples(e) -> list[TurnSample]:
    """The episode's turns as samples: the context each was generated from and what it sampled."""
    out = []
    for k, (context, start) in enumerate(zip(e.contexts, e.starts)):
        stop = e.info.turn_ends[k] + 1
        out.append(TurnSample(list(context), e.ids[start:stop], e.logprobs[start:stop]))
    return out


def samples_generation(samples: list[TurnSample | None], pad_id: int, tokenizer=None,
                       truncated: list[bool] | None = None) -> Generation:
    """A :class:`Generation` of one row per sample (``None``: an empty row, nothing in it): the
    context as the prompt (left-padded), the sampled ids as the response, trained on where the
    sample's ``policy`` says (all of them without one)."""
    rows = len(samples)
    width = max([1, *(len(s.ids) for s in samples if s is not None)])
    prompt_width = max([1, *(len(s.context) for s in samples if s is not None)])
    prompt_ids = torch.full((rows, prompt_width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((rows, prompt_width), dtype=torch.long)
    response_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    response_mask = torch.zeros((rows, width), dtype=torch.long)
    with_logprobs = any(s is not None and s.logprobs is not None for s in samples)
    logprobs = torch.zeros((rows, width), dtype=torch.float32) if with_logprobs else None
    policy_mask = torch.zeros((rows, width), dtype=torch.long)
    for i, s in enumerate(samples):
        if s is None:
            continue
        p, r = len(s.context), len(s.ids)
        prompt_ids[i, prompt_width - p:] = torch.tensor(s.context, dtype=torch.long)
        prompt_mask[i, prompt_width - p:] = 1
        response_ids[i, :r] = torch.tensor(s.ids, dtype=torch.long)
        response_mask[i, :r] = 1
        policy_mask[i, :r] = 1 if s.policy is None else torch.tensor(s.policy, dtype=torch.long)
        if logprobs is not None and s.logprobs is not None:
            logprobs[i, :r] = torch.tensor(s.logprobs, dtype=torch.float32)
    texts = [tokenizer.decode(s.ids, skip_special_tokens=True) if tokenizer is not None and s is not None else ""
             for s in samples]
    return Generation(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                      response_mask=response_mask, truncated=torch.tensor(truncated or [False] * rows),
                      completions=texts, rollout_logprobs=logprobs, policy_mask=policy_mask)


def split_episodes(gen: Generation, slots: int, pad_id: int, tokenizer=None) -> Generation:
    """Episodes (one row each, their turn samples in ``EpisodeInfo.samples``) as turn samples:
    ``slots`` rows per episode, in order (episode ``i``'s turn ``k`` is row ``i * slots + k``;
    slots past its last turn are empty rows); ``rollout_logprobs`` only when the engine returned
    them. A sample is marked truncated when its episode is
    (they share the episode's reward, so ``algorithm.mask_truncated`` drops them together).
    Episodes with more turns than ``slots`` raise ``ValueError``."""
    samples: list[TurnSample | None] = []
    truncated: list[bool] = []
    for i, info in enumerate(gen.episodes or []):
        turns = list(info.samples or [])
        if gen.rollout_logprobs is None:  # the engine returned none (HF): the driver's zeros are no log-probs
            turns = [replace(t, logprobs=None) for t in turns]
        if len(turns) > slots:
            raise ValueError(f"episode {i} has {len(turns)} turn samples, more than the {slots} slots")
        samples += turns + [None] * (slots - len(turns))
        truncated += [bool(gen.truncated[i]) and k < len(turns) for k in range(slots)]
    return samples_generation(samples, pad_id, tokenizer, truncated)
