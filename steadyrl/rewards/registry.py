"""The registry of built-in reward functions, filled by a decorator.

A reward function follows steadyrl's convention (a TRL-style one, called by keyword, works too:
see :mod:`steadyrl.rewards.calling`)::

    fn(prompts: list[str], completions: list[str], **columns) -> list[float | None]

``columns`` are the dataset's extra columns (``answer=[...]`` and the rest), each a list aligned
with the batch; a function takes ``**kwargs`` for the columns it does not use. ``None`` means
"cannot score this sample" (the sample is left out of the update), not a zero reward.

A built-in is registered as a *factory*: it takes keyword options and returns a reward function,
so ``BUILTIN_REWARDS["math"](answer_key="solution")`` is a ready reward function.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["RewardFn", "RewardFactory", "BUILTIN_REWARDS", "register_reward"]

RewardFn = Callable[..., list]
"""``fn(prompts, completions, **columns) -> list[float | None]``."""

RewardFactory = Callable[..., RewardFn]
"""``factory(**options) -> RewardFn``."""

BUILTIN_REWARDS: dict[str, RewardFactory] = {}


def register_reward(name: str) -> Callable[[RewardFactory], RewardFactory]:
    """Decorator: register a reward-function factory under ``name``."""

    def wrap(factory: RewardFactory) -> RewardFactory:
        if name in BUILTIN_REWARDS:
            raise ValueError(f"reward {name!r} is already registered")
        BUILTIN_REWARDS[name] = factory
        return factory

    return wrap
