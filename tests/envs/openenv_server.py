"""A small OpenEnv environment server for the tests: ``python openenv_server.py PORT LIFETIME_S``.

Guess a number from 0 to 9 (drawn from the reset seed): each step's ``message`` is a guess, the
observation says higher / lower / right, reward 1.0 on the right guess (which ends the episode),
0.0 otherwise; at most 4 guesses. Listens on 127.0.0.1 only and exits by itself after LIFETIME_S.
"""

from __future__ import annotations

import os
import random
import sys
import threading

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessAction(Action):
    message: str = Field(..., description="A guess: a number from 0 to 9")


class GuessObservation(Observation):
    prompt: str = Field(default="", description="What the player is told")


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> GuessObservation:
        self.target = random.Random(seed).randint(0, 9)
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(prompt="Guess my number (0-9).", done=False, reward=None)

    def step(self, action: GuessAction, timeout_s=None, **kwargs) -> GuessObservation:
        self._state.step_count += 1
        try:
            guess = int(action.message.strip())
        except ValueError:
            guess = -1
        right = guess == self.target
        hint = "right" if right else ("higher" if guess < self.target else "lower")
        return GuessObservation(prompt=hint, done=right or self._state.step_count >= 4, reward=1.0 if right else 0.0)

    @property
    def state(self) -> State:
        return self._state


if __name__ == "__main__":
    port, lifetime = int(sys.argv[1]), float(sys.argv[2])
    threading.Timer(lifetime, lambda: os._exit(0)).start()  # bounded: gone whatever the test does
    app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=8)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
