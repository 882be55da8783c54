"""``PromptSampler``: an endless, deterministic, resumable stream of full prompt batches.

The sampler walks one infinite stream: the records in the order of permutation 0, then
permutation 1, and so on, permutation ``e`` being drawn from a generator seeded with
``(seed, e)`` (identity order with ``shuffle=False``). A batch is the next ``batch_size`` records
of that stream, so:

* every batch is full - no ``drop_last``, no short last batch: an epoch's tail is completed with
  the head of the next epoch (and a ``batch_size`` larger than the data set simply spans epochs).
  A full batch keeps GRPO groups whole, since the trainer expands each prompt into its group;
* within one epoch of the stream every record appears exactly once;
* the whole state is one integer, the number of records drawn, so ``state_dict`` /
  ``load_state_dict`` resume exactly where a run stopped, and ``epoch`` (records drawn / data set
  size, a float) is the progress through the data.

The permutations come from numpy's PCG64 seeded with ``SeedSequence([seed, epoch])``: the same on
every machine for a given numpy version.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ConfigError, DataError

__all__ = ["PromptSampler"]


class PromptSampler:
    """Endless iterator of batches (lists of records, or of any items); see the module docstring."""

    def __init__(self, records: Sequence, batch_size: int, *, seed: int, shuffle: bool = True):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r} must be an integer >= 1")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed={seed!r} must be an integer >= 0")
        if not records:
            raise DataError("the prompt sampler needs at least one record, got none")
        self.records = list(records)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = bool(shuffle)
        self._drawn = 0  # records drawn so far: the whole state
        self._order_epoch = -1
        self._order: np.ndarray | None = None

    def __len__(self) -> int:
        """Number of records (the stream itself is endless)."""
        return len(self.records)

    @property
    def epoch(self) -> float:
        """Passes over the data so far: records drawn / number of records."""
        return self._drawn / len(self.records)

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._order_epoch:
            n = len(self.records)
            if self.shuffle:
                rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch])))
                self._order = rng.permutation(n)
            else:
                self._order = np.arange(n)
            self._order_epoch = epoch
        return self._order

    def __iter__(self) -> PromptSampler:
        return self

    def __next__(self) -> list[dict]:
        return self.next_batch()

    def next_batch(self) -> list[dict]:
        """The next ``batch_size`` records of the stream."""
        n = len(self.records)
        batch = []
        while len(batch) < self.batch_size:
            epoch, offset = divmod(self._drawn, n)
            take = min(self.batch_size - len(batch), n - offset)
            order = self._permutation(epoch)
            batch.extend(self.records[i] for i in order[offset : offset + take])
            self._drawn += take
        return batch

    def state_dict(self) -> dict:
        """The position in the stream, plus what the stream depends on (checked on load)."""
        return {
            "drawn": self._drawn,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_records": len(self.records),
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``'s position: the next batches are the ones the saved run would have drawn.

        The stream must be the same one: a different seed, shuffle or number of records is an
        error rather than a silently different order. ``batch_size`` may differ (the position is
        counted in records).
        """
        for key in ("drawn", "seed", "shuffle", "num_records"):
            if key not in state:
                raise ConfigError(f"prompt sampler state lacks {key!r}; got keys {sorted(state)}")
        if state["num_records"] != len(self.records):
            raise DataError(
                f"the checkpoint's prompt sampler ran over {state['num_records']} records, this run has "
                f"{len(self.records)} (did the data or max_prompt_tokens change?)"
            )
        for key in ("seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ConfigError(
                    f"{key}={getattr(self, key)!r} differs from the checkpoint's {key}={state[key]!r}; "
                    "resuming needs the same value"
                )
        drawn = state["drawn"]
        if isinstance(drawn, bool) or not isinstance(drawn, int) or drawn < 0:
            raise ConfigError(f"prompt sampler state has drawn={drawn!r}, expected an integer >= 0")
        self._drawn = drawn
