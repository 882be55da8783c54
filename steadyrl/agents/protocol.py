"""What the episode driver (:mod:`steadyrl.rollout.episodes`) asks of an agent, and what it gets back.

An *agent* answers the policy's turns: :class:`~steadyrl.agents.toolagent.ToolAgent` runs the tool
calls a turn makes, :class:`~steadyrl.agents.environment.EnvironmentAgent` passes the turn to one
environment instance per episode. The driver owns the tokens; an agent sees text and returns
messages, which the chat template renders into observation tokens.

    start(rows, seeds)      -> [Start]   one per episode, before the first turn
    respond(states, texts)  -> [Reply]   the still-running episodes' latest turns, all at once
    close(states)                        every episode, whatever happened
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Protocol


@dataclass
class Start:
    """How an episode begins: ``messages`` replace the row's prompt when given."""

    state: object = None
    messages: list[dict] | None = None
    failed: bool = False
    error: str | None = None
    elapsed_s: float = 0.0


@dataclass
class Reply:
    """The answer to one turn: ``messages`` to append (tool results, an observation), a reward for
    the turn (None = none), whether the episode is over, and what went wrong."""

    messages: list[dict] = field(default_factory=list)
    assistant: dict | None = None  # the turn as the conversation keeps it (with tool_calls); None: its text
    reward: float | None = None
    done: bool = False
    failed: bool = False  # the episode cannot go on and is left out of the update (an environment crash)
    error: str | None = None
    tool_calls: int = 0
    tool_errors: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0


class Agent(Protocol):
    """An agent, and the capabilities it declares (read by the step, never probed):

    * ``multi_turn_mode``: how its episodes are trained (``single``, ``stepwise``, ``as_sampled``;
      ``rollout.multi_turn.mode``, resolved against the chat template when the agent is built);
    * ``drives_episodes``: it runs a step's episodes itself (``rollout(engine, ...)``, the gateway's)
      instead of answering turns the episode driver generates;
    * ``splits_trajectories``: an episode that rewrote its history trains each trajectory as a sample;
    * ``tools`` (name -> tool, for the episode metrics), ``tool_schemas``, ``parser`` (the tool-call
      parser, None without tools).

    :class:`AgentBase` gives the defaults an agent without tools, driving nothing, has."""

    multi_turn_mode: str
    drives_episodes: bool
    splits_trajectories: bool
    tools: Mapping[str, object]
    parser: object | None
    observation_role: str
    tool_schemas: list[dict] | None
    template_kwargs: dict  # variables of the chat template (data.chat_template_kwargs)

    def start(self, rows: list[dict], seeds: list[int]) -> list[Start]: ...

    def respond(self, states: list, texts: list[str], last: list[bool] | None = None) -> list[Reply]: ...

    def close(self, states: list) -> None: ...

    def shutdown(self) -> None: ...  # the end of the run: workers go


class AgentBase:
    """The declared capabilities' defaults (:class:`Agent`): one-sample episodes the driver
    generates, no tools. An agent class sets what differs as class or instance attributes."""

    multi_turn_mode: str = "single"
    drives_episodes: bool = False
    splits_trajectories: bool = False
    tools: Mapping[str, object] = MappingProxyType({})
    tool_schemas: list[dict] | None = None
    parser: object | None = None
