"""What an agent's episode leaves behind: every call's exact ids, and the trajectories they make.

Token in, token out. A call's prompt ids are what the gateway rendered (the chat template, or the
prompt's tokens), its response ids and log-probs what the engine sampled; nothing is decoded and
encoded again. A chat call whose messages are the previous call's, then the assistant message it
returned (one of its choices, which ended with an end-of-turn token), then new messages (tool
results, a user turn) is rendered the way the episode driver renders an observation
(:func:`steadyrl.agents.chat.observation_ids`): its prompt ids are the previous prompt ids, the
sampled ids, and the new messages' tokens. A text completion whose prompt is the previous prompt
plus a returned text plus more is built the same way.

Trajectories (*chains*) follow from the ids alone: a call whose prompt ids start with a chain's
ids (its prompt, then everything after it) extends that chain: the ids between are an observation
(attended to, not trained, ``policy_mask`` 0), the sampled ones are trained. A call that extends
no chain (the agent rewrote, summarised or dropped its history; the template re-renders earlier
turns) starts a new chain and is counted in ``rollout/agent/non_append_calls``. The episode's row
is the chain of its last call (the one that ends the episode: what its transcript shows); when an
episode of the step has more than one chain, every chain is trained as a sample of its episode,
sharing its reward (:func:`steadyrl.gateway.assemble.trajectories`, docs/environments.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Chain:
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)  # everything after the prompt
    policy: list[int] = field(default_factory=list)  # 1 on sampled ids
    logprobs: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)  # position of each call's last sampled token
    calls: int = 0
    ended: bool = True  # the last sampled turn ended with an end-of-turn token
    image_inputs: dict | None = None  # a VLM's: the latest call's prompt images (all the chain's images)

    @property
    def full(self) -> list[int]:
        return self.prompt_ids + self.ids


@dataclass
class Served:
    """What a call was answered with, kept to build the next call's prompt ids without re-encoding."""

    messages: list[dict] | None  # chat: the request's messages (as rendered); None for text completions
    tools: list[dict] | None
    prompt_text: str | None
    prompt_ids: list[int]
    choices: list  # protocol.Choice
    ends: list[str | None]  # each choice's end-of-turn text (None: it did not end with one)


@dataclass
class EpisodeRecord:
    """One agent episode: its row, its calls' chains and how it ended."""

    row: dict
    token: str
    chains: list[Chain] = field(default_factory=list)
    last_chain: int | None = None
    last: Served | None = None
    calls: int = 0
    non_append_calls: int = 0
    tool_calls: int = 0
    off_policy_calls: int = 0
    reward: float | None = None
    failed: bool = False
    timed_out: bool = False
    error: str | None = None
    call_failure: str | None = None  # the agent raised because a call to the gateway failed (agent.call_failure)
    closed: bool = False
    transcript: list[dict] = field(default_factory=list)  # after the row's prompt: the last chat call's, and its answer

    def record(self, prompt_ids: list[int], choices: list, ends: list[bool], image_inputs: dict | None = None) -> None:
        """Place a call's choices: the first on the chain it extends (or a new one), each other
        choice on a chain of its own (a sibling sample of the same context). ``image_inputs``: those
        of the call's prompt (a VLM's), which hold every image of the chain so far."""
        self.calls += 1
        host = self._extended(prompt_ids)
        if host is None and self.chains:
            self.non_append_calls += 1
        for j, (choice, ended) in enumerate(zip(choices, ends)):
            if j == 0 and host is not None:
                chain = self.chains[host]
                observation = prompt_ids[len(chain.full):]
                chain.ids += observation
                chain.policy += [0] * len(observation)
                chain.logprobs += [0.0] * len(observation)
                index = host
            else:
                chain = Chain(list(prompt_ids))
                self.chains.append(chain)
                index = len(self.chains) - 1
            chain.image_inputs = image_inputs if image_inputs is not None else chain.image_inputs
            chain.ids += choice.ids
            chain.policy += [1] * len(choice.ids)
            chain.logprobs += list(choice.logprobs)
            chain.turn_ends.append(len(chain.ids) - 1)
            chain.calls += 1
            chain.ended = ended
            if j == 0:
                self.last_chain = index

    def _extended(self, prompt_ids: list[int]) -> int | None:
        """The longest chain whose ids ``prompt_ids`` start with."""
        best, length = None, -1
        for i, chain in enumerate(self.chains):
            full = chain.full
            if len(full) > length and len(prompt_ids) >= len(full) and prompt_ids[:len(full)] == full:
                best, length = i, len(full)
        return best


def _same_call(a: dict, b: dict) -> bool:
    fa, fb = a.get("function", {}), b.get("function", {})
    return fa.get("name") == fb.get("name") and fa.get("arguments") == fb.get("arguments")


def matching_choice(served: Served, message: dict) -> int | None:
    """Which of ``served``'s choices ``message`` (an assistant message the agent sent back) is:
    its content and tool calls, or its whole sampled text as content."""
    from .protocol import message_for_template

    if message.get("role") != "assistant":
        return None
    calls = message.get("tool_calls") or []
    for i, c in enumerate(served.choices):  # the served calls as the agent's came in: arguments as objects
        theirs = message_for_template({"role": "assistant", "tool_calls": c.tool_calls})["tool_calls"] \
            if c.tool_calls else []
        content = c.content if c.content is not None else c.text
        if message.get("content", "") == content and len(calls) == len(theirs) and \
                all(_same_call(x, y) for x, y in zip(calls, theirs)):
            return i
        if not calls and message.get("content", "") == c.text:
            return i
    return None


def appended_chat_ids(served: Served | None, messages: list[dict], tools, tokenizer, *, end_texts: list[str],
                      template_kwargs: dict) -> list[int] | None:
    """The prompt ids of a chat call that continues ``served`` (see the module docstring), or None
    when it does not (then the gateway renders it afresh)."""
    from ..agents.chat import TemplateError, observation_ids

    if served is None or served.messages is None or tools != served.tools:
        return None
    k = len(served.messages)
    if len(messages) < k + 2 or messages[:k] != served.messages:
        return None
    choice = matching_choice(served, messages[k])
    if choice is None or served.ends[choice] is None:
        return None
    try:
        obs = observation_ids(tokenizer, served.messages, messages[k], messages[k + 1:], tools=tools,
                              end_texts=end_texts, template_kwargs=template_kwargs, end=served.ends[choice])
    except TemplateError:  # a template that re-renders earlier turns: a call of its own
        return None
    return served.prompt_ids + list(served.choices[choice].ids) + list(obs)


def appended_text_ids(served: Served | None, prompt: str, tokenizer) -> list[int] | None:
    """The prompt ids of a text completion whose prompt is ``served``'s prompt, one of its choices'
    text and more (the more tokenised on its own), or None."""
    if served is None or served.prompt_text is None:
        return None
    for c in served.choices:
        head = served.prompt_text + c.text
        if c.finish_reason != "stop" or not prompt.startswith(head):
            continue
        rest = prompt[len(head):]
        more = tokenizer(rest, add_special_tokens=False)["input_ids"] if rest else []
        return served.prompt_ids + list(c.ids) + list(more)
    return None
