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
observations take the role ``rollout.multi_turn.observation_role``. A reward of None means "none this turn";
the episode's turn rewards combine by ``rollout.multi_turn.turn_reward`` (sum, or the last turn's).

Anything an environment does wrong — ``reset`` or ``step`` raising or timing out, a reply of the
wrong shape, a non-finite reward — fails that episode only: it is left out of the update and
counted (``rollout/failed_episodes``); the run goes on. Under ``process`` isolation (the default on
Linux) each running episode's instance lives in a sandbox worker of its own, with
``rollout.multi_turn.tool_limits``, the time limit ``rollout.multi_turn.tool_timeout_s`` per call, and everything it
starts killed when a call times out or the run ends. A class loaded by :func:`load_environment`
(``rollout.multi_turn.environment``) is loaded again in a fresh worker; a class handed in as a Python
object is run in a worker forked from the trainer.
"""

from __future__ import annotations

import inspect
import math
import weakref

from ..errors import ConfigError
from .calls import CallRunner, make_sandbox, submit_all, wait_all
from .protocol import AgentBase, Reply, Start

_SPECS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""The spec each class :func:`load_environment` returned was loaded from."""


def load_environment(spec: str) -> type:
    """The class named by ``rollout.multi_turn.environment`` (``file.py:Class`` or ``package.module:Class``), or
    an adapter's (``textarena:<GameId>``, ``openenv:<base_url>``: :mod:`steadyrl.envs`)."""
    from ..envs import adapter_environment, is_spec
    from ..userfn import SPEC_FORMS, resolve_spec

    if is_spec(spec):
        return adapter_environment(spec)

    def err(what: str) -> ConfigError:
        return ConfigError(f"rollout.multi_turn.environment = {spec!r}: {what}; valid: "
                           f"{SPEC_FORMS.replace('function', 'Class')}")

    cls = resolve_spec(str(spec).strip(), err, prefix="_steadyrl_env")
    if not inspect.isclass(cls):
        raise ConfigError(f"rollout.multi_turn.environment = {spec!r} is a {type(cls).__name__}, not a class; "
                          "valid: a class with reset(**row) and step(text) methods")
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(f"rollout.multi_turn.environment = {spec!r}: the class has no {' or '.join(missing)} method; "
                          "valid: a class with reset(**row) -> observation or None and "
                          "step(text) -> (observation, reward, done)")
    try:
        _SPECS[cls] = str(spec).strip()
    except TypeError:  # a class that takes no weak reference: forked, not rebuilt
        pass
    return cls


def env_server(spec: str, role: str) -> EnvServer:
    """A fresh worker's target: the environment class loaded again from ``spec``, behind an :class:`EnvServer`."""
    return EnvServer(load_environment(spec), role)


def _accepts_seed(method) -> bool:
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in params)


def as_messages(observation, role: str) -> list[dict]:
    """An observation as chat messages: text, an image or content parts (one message), one message,
    a list of messages, or None (none); images as ``image_url`` parts with data URLs
    (:func:`steadyrl.agents.images.json_content`)."""
    from .images import json_content

    if observation is None:
        return []
    if isinstance(observation, str):
        return [{"role": role, "content": observation}]
    if isinstance(observation, dict) and "role" in observation:
        return [_json_message(observation)]
    if isinstance(observation, (list, tuple)) and all(isinstance(m, dict) and "role" in m for m in observation):
        return [_json_message(m) for m in observation]
    content = json_content(observation)  # an image, or content parts (text and images): one message
    if content is not observation:
        return [{"role": role, "content": content}]
    raise TypeError(f"an observation must be text, an image, content parts, a message dict or a list of them, "
                    f"got {type(observation).__name__}")


def _json_message(message: dict) -> dict:
    """``message`` with its images as data URLs (a sandbox worker replies in JSON)."""
    from .images import json_content

    return {**message, "content": json_content(message.get("content"))} if "content" in message else dict(message)


def _as_step(out, role: str) -> tuple[list[dict], float | None, bool]:
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise TypeError(f"step() must return (observation, reward, done), got {type(out).__name__}")
    observation, reward, done = out
    if reward is not None:
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"step() returned the reward {reward}, which is not finite")
    return as_messages(observation, role), reward, bool(done)


class EnvServer:
    """One episode's environment, behind ``server(request)``: ``("reset", row, seed)`` makes a new
    instance and returns its first observation as messages (or None); ``("step", text)`` returns
    ``[messages, reward, done]``; ``("close",)`` closes it. In a sandbox it lives in the worker (its
    state never leaves it: replies are JSON); in a thread it lives in the trainer."""

    def __init__(self, cls: type, role: str):
        self.cls, self.role, self.env = cls, role, None

    def __call__(self, request):
        method = request[0]
        if method == "reset":
            _, row, seed = request
            self.env = self.cls()
            kwargs = {**row, "seed": seed} if _accepts_seed(self.env.reset) else dict(row)
            first = self.env.reset(**kwargs)
            return None if first is None else as_messages(first, "user")
        if method == "step":
            return list(_as_step(self.env.step(request[1]), self.role))
        close = getattr(self.env, "close", None)
        self.env = None
        if callable(close):
            close()
        return None


class EnvironmentAgent(AgentBase):
    """Environments, one :class:`EnvServer` per running episode. Under ``process`` isolation each
    is a sandbox worker of its own (kept between steps: a new episode makes a new instance in it),
    so an episode's state, crashes and limits stay in its process; under ``thread`` / ``inline``
    the servers live in the trainer's process."""

    tool_schemas = None

    def __init__(self, cls: type, *, observation_role: str, timeout_s: float, isolation: str, limits=None):
        self.cls = cls
        self.observation_role = observation_role
        self.timeout_s = timeout_s
        self.template_kwargs: dict = {}
        self.isolation, self.limits = isolation, limits
        self._boxes: list = []  # process isolation: sandbox i serves the step's episode i

    def _call(self, states: list, requests: list) -> list:
        """The servers' replies to ``requests`` (one per episode), all at once."""
        if self.isolation == "process":
            return wait_all(submit_all([self._boxes[i] for i in states], requests), self.timeout_s)
        runner = CallRunner(lambda pair: pair[0](pair[1]), self.isolation)
        return runner.map(list(zip(states, requests)), self.timeout_s)

    def start(self, rows: list[dict], seeds: list[int]) -> list[Start]:
        if self.isolation == "process":
            from ..sandbox import Rebuild

            spec = _SPECS.get(self.cls)
            while len(self._boxes) < len(rows):
                target = (EnvServer(self.cls, self.observation_role) if spec is None
                          else Rebuild(env_server, spec, self.observation_role))
                self._boxes.append(make_sandbox(target, self.limits))
            states = list(range(len(rows)))
        else:
            states = [EnvServer(self.cls, self.observation_role) for _ in rows]
        starts = []
        for state, result in zip(states, self._call(states, [("reset", r, s) for r, s in zip(rows, seeds)])):
            if result.ok:
                starts.append(Start(state=state, messages=result.value, elapsed_s=result.elapsed_s))
            else:
                starts.append(Start(state=state, failed=True, error=f"reset: {result.value}",
                                    elapsed_s=result.elapsed_s))
        return starts

    def respond(self, states: list, texts: list[str], last: list[bool] | None = None) -> list[Reply]:
        """Every episode's environment steps, the last turn's too (its reward counts)."""
        replies = []
        for result in self._call(states, [("step", text) for text in texts]):
            if result.ok:
                messages, reward, done = result.value
                replies.append(Reply(messages=messages, reward=reward, done=done, elapsed_s=result.elapsed_s))
            else:
                replies.append(Reply(failed=True, error=f"step: {result.value}", elapsed_s=result.elapsed_s))
        return replies

    def close(self, states: list) -> None:
        """Every episode's environment is closed (its ``close()`` errors cannot fail the step)."""
        self._call([s for s in states if s is not None], [("close",) for s in states if s is not None])

    def shutdown(self) -> None:
        """At the end of the run: the sandbox workers go."""
        for box in self._boxes:
            box.close()
        self._boxes = []
