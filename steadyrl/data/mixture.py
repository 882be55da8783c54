"""``MixtureSampler``: several prompt sources mixed by weight, deterministic and resumable.

Each source has its own :class:`~steadyrl.data.sampler.PromptSampler` (its own shuffled epochs,
seeded with ``seed + index``). Which source the ``k``-th drawn prompt comes from is fixed by a
seeded *choice stream*: block ``b = k // BLOCK`` of it is ``BLOCK`` independent draws with
probabilities ``p_s = w_s / sum(w)`` from numpy's PCG64 seeded with
``SeedSequence([seed, MIX_TAG, b])``. So:

* over many draws the share of source ``s`` tends to ``p_s`` (a source keeps its weight whatever
  its size: a small source is simply repeated over more epochs);
* the whole state is the number of prompts drawn plus each source's sampler state, so
  ``state_dict`` / ``load_state_dict`` resume mid-epoch exactly where a run stopped;
* a batch is the next ``batch_size`` prompts of the mixed stream: sources interleave within it.

The same on every machine for a given numpy version, like :class:`PromptSampler`.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..errors import ConfigError, DataError
from .sampler import PromptSampler

__all__ = ["MixtureSampler"]

BLOCK = 4096
"""Source choices drawn at a time (one seeded generator per block)."""
MIX_TAG = 0x4D4958  # "MIX": keeps the choice stream apart from the sources' permutations


class MixtureSampler:
    """Endless iterator of batches mixing ``sources`` (lists of records) by ``weights``."""

    def __init__(self, sources: Sequence[Sequence], weights: Sequence[float], batch_size: int, *, seed: int,
                 shuffle: bool = True, names: Sequence[str] | None = None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r} must be an integer >= 1")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed={seed!r} must be an integer >= 0")
        self.names = list(names) if names is not None else [str(i) for i in range(len(sources))]
        if not sources or len(weights) != len(sources) or len(self.names) != len(sources):
            raise ConfigError(f"{len(sources)} sources, {len(weights)} weights and {len(self.names)} names: "
                              "give one weight and one name per source (at least one source)")
        for name, w in zip(self.names, weights):
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not (w > 0 and math.isfinite(w)):
                raise ConfigError(f"data.train_sources {name!r}: weight={w!r} must be a finite number > 0")
        for name, records in zip(self.names, sources):
            if not records:
                raise DataError(f"data.train_sources {name!r} has no prompt left to train on")
        total = float(sum(weights))
        self.probs = np.array([w / total for w in weights], dtype=np.float64)
        self.samplers = [PromptSampler(records, 1, seed=seed + i, shuffle=shuffle) for i, records in enumerate(sources)]
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = bool(shuffle)
        self._drawn = 0
        self._block = -1
        self._choices: np.ndarray | None = None

    def __len__(self) -> int:
        """Records over all sources (the stream itself is endless)."""
        return sum(len(s) for s in self.samplers)

    @property
    def epoch(self) -> float:
        """Prompts drawn / records over all sources."""
        return self._drawn / len(self)

    def source_epochs(self) -> dict[str, float]:
        """Passes over each source so far."""
        return {name: s.epoch for name, s in zip(self.names, self.samplers)}

    def _choice(self, k: int) -> int:
        block, offset = divmod(k, BLOCK)
        if block != self._block:
            rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, MIX_TAG, block])))
            self._choices = rng.choice(len(self.samplers), size=BLOCK, p=self.probs)
            self._block = block
        return int(self._choices[offset])

    def __iter__(self) -> MixtureSampler:
        return self

    def __next__(self) -> list:
        return self.next_batch()

    def next_batch(self) -> list:
        """The next ``batch_size`` records of the mixed stream."""
        batch = []
        for _ in range(self.batch_size):
            batch.extend(self.samplers[self._choice(self._drawn)].next_batch())
            self._drawn += 1
        return batch

    def state_dict(self) -> dict:
        """The position in the mixed stream and in each source, plus what they depend on."""
        return {"drawn": self._drawn, "seed": self.seed, "shuffle": self.shuffle, "names": list(self.names),
                "probs": self.probs.tolist(), "sources": [s.state_dict() for s in self.samplers]}

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``'s position; the sources, weights, seed and shuffle must be the same."""
        for key in ("drawn", "seed", "shuffle", "names", "probs", "sources"):
            if key not in state:
                raise ConfigError(f"mixture sampler state lacks {key!r}; got keys {sorted(state)} (was the "
                                  "checkpoint made with data.train_path rather than data.train_sources?)")
        if list(state["names"]) != self.names:
            raise ConfigError(f"data.train_sources are {self.names}, the checkpoint's were {state['names']}; "
                              "resuming needs the same sources in the same order")
        if not np.allclose(state["probs"], self.probs, rtol=0, atol=1e-12):
            raise ConfigError(f"data.train_sources weights give shares {self.probs.tolist()}, the checkpoint's "
                              f"gave {state['probs']}; resuming needs the same weights")
        for key in ("seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ConfigError(f"{key}={getattr(self, key)!r} differs from the checkpoint's {key}={state[key]!r}; "
                                  "resuming needs the same value")
        drawn = state["drawn"]
        if isinstance(drawn, bool) or not isinstance(drawn, int) or drawn < 0:
            raise ConfigError(f"mixture sampler state has drawn={drawn!r}, expected an integer >= 0")
        for sampler, saved in zip(self.samplers, state["sources"]):
            sampler.load_state_dict(saved)
        self._drawn = drawn
