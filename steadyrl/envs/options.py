"""The options of every environment adapter spec, typed: names, types, bounds, defaults and help.

An adapter spec is ``<adapter>:<target>?key=value&...`` (``steadyrl/envs/spec.py``), in
``data.train_path`` / ``data.eval_path`` (rows) or ``rollout.multi_turn.environment`` (episodes). Each model
here is the one declaration of an adapter's own options: the adapters read their defaults, types
and bounds from it (:func:`steadyrl.envs.spec.take`), and docs/environments.md's option tables are
generated from it (tools/gen_config_docs.py), like the rewards' (:mod:`steadyrl.config.reward_options`).
It sits in envs/ (below data/, rewards/ and agents/, which import the adapters) and imports only pydantic.

Nothing here imports torch.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ENV_OPTIONS", "ReasoningGymRows", "TextArenaRows", "TextArenaEpisodes", "OpenEnvServer"]


def O(default: Any, help: str, **constraints: Any) -> Any:  # noqa: E743 - one letter, like schema.F
    return Field(default, description=help, **constraints)


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReasoningGymRows(_Options):
    """``reasoning_gym:<task>?...`` in ``data.train_path`` / ``data.eval_path``; any other option
    is the task's own config, passed to it (the task refuses what it does not know)."""

    model_config = ConfigDict(extra="allow")

    seed: int = O(0, "The data seed. Not trainer.seed: like a file, the rows stay the same when the training "
                  "seed changes (which still orders and samples them).", ge=0)
    size: int = O(1000, "Training rows.", ge=1)
    test_size: int = O(100, "Held-out rows.", ge=1)
    system_prompt: str = O("default", "One of reasoning-gym's system prompts (default, simple, direct, DeepSeekZero, "
                           "chain_of_draft; they ask for the answer in <answer></answer>): the prompt is [system, "
                           "user] messages, rendered by the chat template. none: the bare question as a plain string.")
    instruction: str = O("", "Text appended to every question (after a space), e.g. 'Reply in the form: The answer "
                         "is N.' for a small model that never writes answer tags (read it with the reward's marker; "
                         "write an & in it as %26); the scored entry keeps the task's question. With "
                         "system_prompt=none and data.chat_template: true the prompt is one user message under "
                         "the chat template's own system prompt.")


class TextArenaEpisodes(_Options):
    """``textarena:<GameId>?...`` in ``rollout.multi_turn.environment``."""

    player: int | None = O(None, "The policy's seat: 0 or 1 (0 in a single-player game). null: the row's "
                           "game_seed chooses (first when even, second when odd).", ge=0, le=1)


class TextArenaRows(TextArenaEpisodes):
    """``textarena:<GameId>?...`` in ``data.train_path`` / ``data.eval_path``: one row per game start."""

    seed: int = O(0, "The first training game_seed (held-out seeds come from another stream, disjoint).", ge=0)
    size: int = O(1000, "Training rows (game starts).", ge=1)
    test_size: int = O(100, "Held-out rows.", ge=1)


class OpenEnvServer(_Options):
    """``openenv:<server URL>?...`` in ``rollout.multi_turn.environment``."""

    action_key: str = O("message", "The action field that carries the policy's text (echo and TextArena servers: "
                        "message; the coding server: code).")
    observation_key: str | None = O(None, "The observation field shown to the policy; null (automatic): the one "
                                    "text field when there is exactly one (besides done, reward, metadata), else "
                                    "the fields as JSON.")
    image_key: str | None = O(None, "The observation field holding an image (a data:image/...;base64, URL) shown "
                              "to a vision-language policy after the text; null: none. A text policy given one "
                              "stops the run (docs/agents.md, Images in observations).")
    seed: bool = O(True, "Pass the episode's seed to reset (false for a server that refuses one).")
    timeout_s: float = O(60.0, "The client's limit for one reply (rollout.multi_turn.tool_timeout_s still bounds "
                               "the call).",
                         ge=1)


ENV_OPTIONS: dict[str, type[_Options]] = {
    "reasoning_gym": ReasoningGymRows,
    "textarena_rows": TextArenaRows,
    "textarena": TextArenaEpisodes,
    "openenv": OpenEnvServer,
}
"""Each adapter spec's options by the name of its table in docs/environments.md."""
