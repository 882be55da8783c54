"""The frame shared by rewards that ask a model or a server (``reward_model``, ``llm_judge``,
``http``): a cache of scores within a run, duplicate samples scored once, failures counted by
reason, and the extra metrics the scorer collects.

A subclass implements ``score_new(prompts, completions, columns) -> list[float | None]`` for the
samples the cache does not hold, and may post-process the whole batch in ``finish`` (the reward
model's batch normalisation, which must see cached and new samples alike). For sample ``i``::

    key_i = sha256(json([reward name, prompt_i, completion_i, answer_i]))

A key seen before (in this batch or an earlier one) is not scored again; the cache keeps the
``cache_size`` most recently used keys (an LRU dict, 0 turns it off). A sample that failed
(``None``) is not cached, so it is asked again the next time it comes up.

**Extra metrics** (the small mechanism :class:`~steadyrl.rewards.RewardScorer` uses): a reward
callable may have a ``metrics()`` method returning ``{short_name: float}`` for the calls since it
was last asked; the scorer logs them as ``reward/<name>/<short_name>`` after every batch (under
``isolation: process`` the worker's copy, the one that scored, reports them with the batch). This class reports ``time_s``
(seconds spent scoring, waiting for the model or server included), ``cache_hit_rate`` (samples
answered from the cache or by a duplicate in the batch, over samples) and ``failures/<reason>`` (samples that scored ``None`` for that reason, see
:mod:`steadyrl.rewards.http_client`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from ..metrics import Count

__all__ = ["CachedReward"]

DEFAULT_CACHE_SIZE = 100_000


def _key(name: str, prompt, completion, answer) -> str:
    text = json.dumps([name, prompt, completion, answer], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class CachedReward:
    """Base of the model and server rewards (see the module docstring). ``preferred_isolation`` is
    the isolation :class:`~steadyrl.rewards.RewardSpec` takes when the user sets none."""

    preferred_isolation = "thread"
    preferred_chunk_size = None  # it batches its own calls (a model forward, a request): whole batches

    def __init__(self, name: str, *, cache_size: int = DEFAULT_CACHE_SIZE, answer_key: str = "answer"):
        self.__name__ = name
        self.cache_size = cache_size  # an integer >= 0: steadyrl.config.reward_options.CachedOptions
        self.answer_key = answer_key
        self._cache: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()  # one batch at a time (a timed-out thread may still run)
        self._counts_lock = threading.Lock()
        self._reset_counts()

    def _reset_counts(self) -> None:
        self._lookups, self._hits, self._failures, self._seconds = 0, 0, {}, 0.0

    # --- what a subclass provides -------------------------------------------------------------
    def score_new(self, prompts: list, completions: list, columns: dict) -> list:
        raise NotImplementedError

    def finish(self, scores: list) -> list:
        return scores

    # --- the call -----------------------------------------------------------------------------
    def __call__(self, prompts, completions, **columns) -> list:
        with self._lock:
            t0 = time.perf_counter()
            n = len(completions)
            answers = columns.get(self.answer_key) or [None] * n
            scores: list = [None] * n
            todo: dict[str, list[int]] = {}
            for i in range(n):
                key = _key(self.__name__, prompts[i], completions[i], answers[i])
                if key in self._cache:
                    self._cache.move_to_end(key)
                    scores[i] = self._cache[key]
                else:
                    todo.setdefault(key, []).append(i)
            if todo:
                self._score_todo(todo, scores, prompts, completions, columns)
            with self._counts_lock:
                self._lookups += n
                self._hits += n - len(todo)
            scores = self.finish(scores)
            with self._counts_lock:
                self._seconds += time.perf_counter() - t0
            return scores

    def _score_todo(self, todo: dict, scores: list, prompts, completions, columns: dict) -> None:
        firsts = [idx[0] for idx in todo.values()]
        sub_columns = {k: [v[i] for i in firsts] for k, v in columns.items()}
        new = self.score_new([prompts[i] for i in firsts], [completions[i] for i in firsts], sub_columns)
        if len(new) != len(firsts):
            raise RuntimeError(f"{self.__name__}: {len(new)} scores for {len(firsts)} samples")
        for (key, idx), value in zip(todo.items(), new):
            for i in idx:
                scores[i] = value
            if value is not None and self.cache_size:
                self._cache[key] = value
                if len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)

    def count_failure(self, reason: str, samples: int = 1) -> None:
        """Count ``samples`` samples that scored ``None`` because of ``reason``."""
        with self._counts_lock:
            self._failures[reason] = self._failures.get(reason, 0) + samples

    def metrics(self) -> dict[str, float]:
        """``time_s``, ``cache_hit_rate`` and ``failures/<reason>`` since the last call (then reset)."""
        with self._counts_lock:
            out = {f"failures/{reason}": Count(n) for reason, n in sorted(self._failures.items())}
            if self._lookups:
                out["cache_hit_rate"] = self._hits / self._lookups
                out["time_s"] = self._seconds
            self._reset_counts()
        return out

    def __getstate__(self):  # a process worker pickles nothing of it, but copy/deepcopy must work
        state = self.__dict__.copy()
        state["_lock"] = state["_counts_lock"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock, self._counts_lock = threading.Lock(), threading.Lock()
