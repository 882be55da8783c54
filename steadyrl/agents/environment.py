"""Environments: a user class driving an episode, one instance per episode.

    class Env:
        def reset(self, **row):            # the data row (prompt, answer, other columns)
            return None                    # None: the row's prompt starts the episode,
                                           # or a first observation (text / message / messages)
        def step(self, text):              # the policy's latest turn, as text
            return observation, reward, done   # observation: text / message / messages / None
        def close(self): ...               # optional

``reset`` also receives ``seed=`` when its signature accepts it (or ``**kwargs``): a number derived
from ``trainer.seed`` and the sample's index, so a resumed run replays the same episodes. Text
observations take the role ``rollout.observation_role``. A reward of None means "none this turn";
the episode's turn rewards combine by ``rollout.turn_reward`` (sum, or the last turn's).

Anything an environment does wrong — ``reset`` or ``step`` raising or timing out, a reply of the
wrong shape, a non-finite reward — fails that episode only: it is left out of the update and
counted (``rollout/failed_episodes``); the run goes on. Environment instances keep state between
calls, so they run in the trainer process (``thread`` or ``inline`` isolation).
"""

from __future__ import annotations

import inspect
import math

from ..errors import ConfigError
from .calls import run_calls
from .protocol import Reply, Start


def load_environment(spec: str) -> type:
    """The class named by ``rollout.environment`` (``file.py:Class`` or ``package.module:Class``)."""
    from ..userfn import SPEC_FORMS, resolve_spec

    def err(what: str) -> ConfigError:
        return ConfigError(f"rollout.environment = {spec!r}: {what}; valid: {SPEC_FORMS.replace('function', 'Class')}")

    cls = resolve_spec(str(spec).strip(), err, prefix="_steadyrl_env")
    if not inspect.isclass(cls):
        raise ConfigError(f"rollout.environment = {spec!r} is a {type(cls).__name__}, not a class; "
                          "valid: a class with reset(**row) and step(text) methods")
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(f"rollout.environment = {spec!r}: the class has no {' or '.join(missing)} method; "
                          "valid: a class with reset(**row) -> observation or None and "
                          "step(text) -> (observation, reward, done)")
    return cls


def _accepts_seed(method) -> bool:
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in params)


def as_messages(observation, role: str) -> list[dict]:
    """An observation as chat messages: text, one message, a list of messages, or None (none)."""
    if observation is None:
        return []
    if isinstance(observation, str):
        return [{"role": role, "content": observation}]
    if isinstance(observation, dict) and "role" in observation:
        return [dict(observation)]
    if isinstance(observation, (list, tuple)) and all(isinstance(m, dict) and "role" in m for m in observation):
        return [dict(m) for m in observation]
    raise TypeError(f"an observation must be text, a message dict or a list of them, got {type(observation).__name__}")


def _as_step(out, role: str) -> tuple[list[dict], float | None, bool]:
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise TypeError(f"step() must return (observation, reward, done), got {type(out).__name__}")
    observation, reward, done = out
    if reward is not None:
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"step() returned the reward {reward}, which is not finite")
    return as_messages(observation, role), reward, bool(done)


class EnvironmentAgent:
    tool_schemas = None

    def __init__(self, cls: type, *, observation_role: str, timeout_s: float, isolation: str):
        self.cls = cls
        self.observation_role = observation_role
        self.timeout_s = timeout_s
        self.template_kwargs: dict = {}
        self.isolation = "thread" if isolation == "process" else isolation

    def _reset(self, row: dict, seed: int):
        env = self.cls()
        kwargs = {**row, "seed": seed} if _accepts_seed(env.reset) else dict(row)
        first = env.reset(**kwargs)
        return env, (None if first is None else as_messages(first, "user"))

    def start(self, rows: list[dict], seeds: list[int]) -> list[Start]:
        thunks = [lambda row=row, seed=seed: self._reset(row, seed) for row, seed in zip(rows, seeds)]
        starts = []
        for result in run_calls(thunks, self.timeout_s, self.isolation):
            if result.ok:
                env, messages = result.value
                starts.append(Start(state=env, messages=messages, elapsed_s=result.elapsed_s))
            else:
                starts.append(Start(failed=True, error=f"reset: {result.value}", elapsed_s=result.elapsed_s))
        return starts

    def respond(self, states: list, texts: list[str]) -> list[Reply]:
        role = self.observation_role
        thunks = [lambda env=env, text=text: _as_step(env.step(text), role) for env, text in zip(states, texts)]
        replies = []
        for result in run_calls(thunks, self.timeout_s, self.isolation):
            if result.ok:
                messages, reward, done = result.value
                replies.append(Reply(messages=messages, reward=reward, done=done, elapsed_s=result.elapsed_s))
            else:
                replies.append(Reply(failed=True, error=f"step: {result.value}", elapsed_s=result.elapsed_s))
        return replies

    def close(self, states: list) -> None:
        for env in states:
            close = getattr(env, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # an environment's clean-up cannot fail the step
                    pass
