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
from typing import Protocol


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
    observation_role: str
    tool_schemas: list[dict] | None
    template_kwargs: dict  # variables of the chat template (data.chat_template_kwargs)

    def start(self, rows: list[dict], seeds: list[int]) -> list[Start]: ...

    def respond(self, states: list, texts: list[str], last: list[bool] | None = None) -> list[Reply]: ...

    def close(self, states: list) -> None: ...

    def shutdown(self) -> None: ...  # the end of the run: workers go
