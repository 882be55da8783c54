"""The parameter objects of the rewards that ask a model or a server (``llm_judge``, ``reward_model``,
``http``): small frozen groups of their checked options, each named for what it is, built once when
the reward is built, so a reward's constructor takes a handful of these instead of a dozen keywords.

The options a user writes (``rewards[i].options``: names, defaults, ranges, help) are the typed
models of :mod:`steadyrl.config.reward_options`; a factory validates its options with its model and
builds these from it (:meth:`RequestLimits.of`, :meth:`LocalModel.of`, ...). Nothing here has a
default of its own, so the model stays the one place a default is written.

Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Caching", "Endpoint", "RequestLimits", "LocalModel"]


@dataclass(frozen=True)
class Caching:
    """The score cache of a :class:`~steadyrl.rewards.cached.CachedReward`: the ``size`` most recently
    used keys kept (0 = off); the gold answer's column ``answer_key`` is part of each key."""

    size: int
    answer_key: str

    @classmethod
    def of(cls, options) -> "Caching":
        """From a checked options model with ``cache_size`` (and ``answer_key``, else ``"answer"``)."""
        return cls(options.cache_size, getattr(options, "answer_key", "answer"))


@dataclass(frozen=True)
class Endpoint:
    """Where a reward's requests go: ``url`` (None: not given, which the reward reports), the extra
    ``headers`` (a value may be a :class:`~steadyrl.secrets.Secret`, revealed only in the request),
    the environment variable holding a bearer key (``api_key_env``, never the key), and whether the
    server is connected to at start-up (``check_url``)."""

    url: str | None
    api_key_env: str | None
    check_url: bool
    headers: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RequestLimits:
    """How hard a reward may press its server: ``concurrency`` requests in flight, each bounded by
    ``request_timeout_s`` and retried ``retries`` times after a transient failure, the first pause
    ``backoff_s`` (doubling: :func:`~steadyrl.rewards.http_client.post_json`)."""

    concurrency: int
    retries: int
    backoff_s: float
    request_timeout_s: float

    @classmethod
    def of(cls, options) -> "RequestLimits":
        """From a checked options model (:class:`~steadyrl.config.reward_options.RequestOptions`' fields)."""
        return cls(options.concurrency, options.retries, float(options.backoff_s), float(options.request_timeout_s))


@dataclass(frozen=True)
class LocalModel:
    """A model run in the trainer's process: ``source`` (hub name or directory) at ``revision``, on
    ``device`` in ``dtype`` (``"auto"``: the trainer's, :class:`~steadyrl.rewards.reward_model.DeviceReward`),
    with transformers' ``trust_remote_code``."""

    source: str
    revision: str | None
    device: str
    dtype: str
    trust_remote_code: bool

    @classmethod
    def of(cls, options) -> "LocalModel":
        """From a checked options model (:class:`~steadyrl.config.reward_options.DeviceOptions`' fields and
        ``model``; ``trust_remote_code`` False where the model has no such option)."""
        return cls(options.model, options.revision, options.device, options.dtype,
                   bool(getattr(options, "trust_remote_code", False)))
