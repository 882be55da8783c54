"""``rollout.multi_turn.*``: multi-turn episodes (docs/agents.md) - tools, an environment or an agent
served through the gateway, how an episode's turns and observations are bounded, where tools run, and how
an episode becomes training samples. With no tools, no environment and no agent an episode is one turn and
nothing here applies (:attr:`MultiTurnConfig.enabled` is false).

Until 0.1.0 these keys sat directly under ``rollout`` (``rollout.max_turns``, ``rollout.multi_turn_mode``, ...);
:mod:`steadyrl.config.renamed` still reads those names, with a note. Part of the typed configuration
(:mod:`steadyrl.config.schema` re-exports every section).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .rewards import RewardLimitsConfig
from .base import F, MAX_PROCESSES, MAX_TOKENS, Section


class MultiTurnConfig(Section):
    """Multi-turn episodes (docs/agents.md): tools, an environment or an agent; off while none is set."""

    tools: list[str] = F([], "Tool functions the policy may call (file.py:fn or package.module:fn), with "
                         "type hints and a docstring; their JSON schemas go to the chat template's tools=.")
    tool_parser: str = F("hermes", "How tool calls are read from a turn: hermes (<tool_call>{json}</tool_call>, "
                         "Qwen2.5/Qwen3/Hermes), llama3_json (Llama-3.1 JSON calls), qwen3_coder, mistral, "
                         "glm45, kimi_k2, harmony, deepseek, pythonic, command_r, auto (the format a turn is "
                         "written in) or a file.py:fn.")
    environment: str | None = F(None, "An environment class (file.py:Class): one instance per episode, "
                                "reset(**row) -> first observation or None, step(text) -> "
                                "(observation, reward, done).")
    agent: str | None = F(None, "An agent function (file.py:run_episode) that runs each episode against the "
                          "OpenAI-compatible gateway serving the policy (docs/environments.md): (row, client) or "
                          "(row, base_url, api_key) -> reward or None (None: the reward functions score it).")
    agent_concurrency: int = F(256, "Episodes of rollout.multi_turn.agent that run at once; the calls of all running "
                               "episodes are batched into one generate per wave.", ge=1, le=MAX_PROCESSES)
    agent_timeout_s: float = F(600.0, "Time limit of one rollout.multi_turn.agent episode; one that exceeds it (or raises) "
                               "is left out of the update and counted in rollout/agent/timeouts.", gt=0)
    observation_role: Literal["user", "tool"] = F("user", "Role of an environment's text observations in "
                                                  "the chat template (tool results are always 'tool').")
    mode: Literal["auto", "single", "stepwise", "as_sampled"] = F(
        "auto", "How an episode becomes training samples (docs/agents.md, Multi-turn modes): single (one "
        "sequence, exactly the chat template's rendering of the whole conversation; needs a template that "
        "only appends), stepwise (each turn a sample: the template's rendering of the history at that turn, "
        "as at inference, plus the sampled ids; samples of an episode share its reward), as_sampled (one "
        "sequence as the policy saw it while sampling, earlier turns never re-rendered), auto (single when "
        "the start-up probe finds the template append-only, else stepwise).")
    turn_reward: Literal["sum", "last"] = F("sum", "How an environment's per-turn rewards combine into the "
                                           "episode's, which is added to the reward functions' score.")
    max_turns: int = F(8, "Most policy turns in an episode; an episode still calling tools then is "
                       "truncated.", ge=1, le=MAX_TOKENS)
    max_observation_tokens: int = F(512, "Longest observation (tool result or environment message) in "
                                    "tokens, the chat template's own tokens included; longer ones have "
                                    "their contents shortened (the template's tokens are never cut, so "
                                    "start-up refuses a limit not above what the template needs for one "
                                    "empty observation).", ge=1, le=MAX_TOKENS)
    observation_truncation: Literal["right", "left"] = F("right", "Which end of a long observation is cut: "
                                                         "right keeps its start, left keeps its end.")
    max_episode_tokens: int | None = F(None, "Most tokens after the prompt (turns and observations); an "
                                       "episode that reaches it is truncated (so algorithm.mask_truncated "
                                       "applies). null = max_turns * max_new_tokens + (max_turns - 1) * "
                                       "max_observation_tokens.", ge=1, le=MAX_TOKENS)
    tool_timeout_s: float = F(30.0, "Time limit of one tool or environment call; a tool that exceeds it "
                              "returns an error to the model, an environment that does fails the episode.", gt=0)
    max_tool_calls_per_turn: int | None = F(8, "Most tool calls of one turn that are run (verl's "
                                            "multi_turn.max_parallel_calls); each further call is answered "
                                            "with an error the model reads, counted in "
                                            "rollout/tool_errors/max_calls. null = no cap.", ge=1)
    tool_time_budget_s: float | None = F(60.0, "Time budget of all the tool calls of one turn, counted from "
                                         "when they are sent: a call still running when it is spent is cut, "
                                         "one not started is not run; both answer with an error, counted in "
                                         "rollout/tool_errors/time_budget. null = each call only under "
                                         "rollout.multi_turn.tool_timeout_s.", gt=0)
    tool_isolation: Literal["process", "thread", "inline"] | None = F(
        None, "Where tool and environment calls run, as rewards[].isolation: process (a contained sandbox "
        "worker, killed with all it started on time-out; default on Linux), thread (a time-out abandons "
        "the call; C code cannot be stopped), inline (no time limit, for debugging).")
    tool_workers: int = F(8, "Sandbox workers for tool calls (process isolation): up to this many calls run "
                          "at once. An environment gets a worker per running episode.", ge=1, le=MAX_PROCESSES)
    tool_limits: RewardLimitsConfig = Field(default_factory=RewardLimitsConfig,
                                            description="Resource limits of the tool and environment workers "
                                                        "(process isolation), as rewards[].limits.")

    @property
    def enabled(self) -> bool:
        """Whether episodes have more than one turn: tools, an environment or an agent is set."""
        return bool(self.tools) or self.environment is not None or self.agent is not None

    def __bool__(self) -> bool:
        # rollout.multi_turn used to be this flag; a section is always truthy, so an old `if rollout.multi_turn:`
        # would silently read "yes". Refuse the question instead.
        raise TypeError("rollout.multi_turn is a config section, not a flag: read rollout.multi_turn.enabled "
                        "(tools, an environment or an agent is set)")

    @model_validator(mode="after")
    def _check_drivers(self) -> "MultiTurnConfig":
        if self.tools and self.environment is not None:
            raise ValueError("rollout.multi_turn.tools and rollout.multi_turn.environment are both set: an episode "
                             "is driven by either tools or an environment; an environment can call functions itself")
        if self.agent is not None and (self.tools or self.environment is not None):
            raise ValueError(f"rollout.multi_turn.agent = {self.agent!r} cannot be combined with "
                             "rollout.multi_turn.tools or rollout.multi_turn.environment: the agent drives its "
                             "episodes itself (it passes its tools to the gateway with tools=); set "
                             "rollout.multi_turn.tools=[] and rollout.multi_turn.environment=null")
        return self
