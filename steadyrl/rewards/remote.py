"""The ``http`` built-in: POST batches to the user's own reward server.

The samples the cache does not hold go out ``batch_size`` at a time (up to ``concurrency``
requests at once), each request a JSON object::

    {"prompts": [...], "completions": [...], "<column>": [...], ...}     (every column, or `columns`)

and the server replies ``{"scores": [s_0, s_1, ...]}``, one number or ``null`` per completion.
A request is retried with back-off on HTTP 429 / 5xx and connection errors and bounded by
``request_timeout_s`` (:mod:`steadyrl.rewards.http_client`). A request that still fails, or whose
reply is not ``{"scores": [...]}`` of the right length with numbers or nulls, scores its own
samples ``None`` (counted under ``reward/http/failures/<reason>``); the other requests' samples
keep their scores. The URL must be http:// or https:// with a host (checked when the config is read), and the
server is checked at start-up (a TCP connect) unless ``check_url: false``. A header value may be
``{env: NAME}`` (``headers: {Authorization: {env: SCORER_AUTH}}``): it is read when the reward is
built and sent as it is, never shown (:mod:`steadyrl.secrets`).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

from ..secrets import Secret
from .cached import CachedReward
from .http_client import RequestFailed, api_key_from_env, check_reachable, checked_url, post_json
from .params import Caching, Endpoint, RequestLimits
from .registry import register_reward

__all__ = ["HttpReward", "http_reward"]


def _scores_of(reply, size: int) -> list:
    scores = reply.get("scores") if isinstance(reply, dict) else None
    if not isinstance(scores, list) or len(scores) != size:
        got = f"{len(scores)} scores" if isinstance(scores, list) else f"{str(reply)[:60]!r}"
        raise RequestFailed("bad_reply", f"expected {{\"scores\": [{size} numbers or null]}}, got {got}")
    out = []
    for x in scores:
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))):
            raise RequestFailed("bad_reply", f"a score is {x!r:.40}, not a number or null")
        out.append(None if x is None else float(x))
    return out


class HttpReward(CachedReward):
    """The ``http`` reward (module docstring)."""

    def __init__(self, endpoint: Endpoint, limits: RequestLimits, caching: Caching, *, batch_size: int,
                 columns: list[str] | None):
        super().__init__("http", cache_size=caching.size, answer_key=caching.answer_key)
        self.url = checked_url("http reward: option url", endpoint.url)
        self.limits, self.batch_size, self.columns = limits, batch_size, columns
        self.reads_columns = tuple(columns or ())
        # a header given as {env: NAME} stays a Secret until the request is sent (post_json reveals it)
        self.headers = {str(k): v if isinstance(v, Secret) else str(v) for k, v in (endpoint.headers or {}).items()}
        if endpoint.api_key_env is not None:
            self.headers["Authorization"] = "Bearer " + api_key_from_env("http", endpoint.api_key_env)
        if endpoint.check_url:
            check_reachable("http reward: option url", self.url)

    def __repr__(self) -> str:  # never shows the headers (a key)
        return f"HttpReward(url={self.url!r})"

    def _post(self, body: dict, size: int) -> list:
        try:
            limits = self.limits
            reply = post_json(self.url, body, headers=self.headers, timeout_s=limits.request_timeout_s,
                              retries=limits.retries, backoff_s=limits.backoff_s)
            scores = _scores_of(reply, size)
        except RequestFailed as err:
            self.count_failure(err.reason, size)
            return [None] * size
        bad = sum(1 for x in scores if x is None or not math.isfinite(x))
        if bad:
            self.count_failure("server_none", bad)
        return scores

    def score_new(self, prompts: list, completions: list, columns: dict) -> list:
        keep = columns if self.columns is None else {k: v for k, v in columns.items() if k in self.columns}
        bodies, sizes = [], []
        for start in range(0, len(completions), self.batch_size):
            part = slice(start, start + self.batch_size)
            body = {k: v[part] for k, v in keep.items()}
            body.update(prompts=list(prompts[part]), completions=list(completions[part]))
            bodies.append(body), sizes.append(len(completions[part]))
        with ThreadPoolExecutor(max_workers=min(self.limits.concurrency, max(1, len(bodies)))) as pool:
            parts = list(pool.map(self._post, bodies, sizes))
        return [x for part in parts for x in part]


@register_reward("http")
def http_reward(**options) -> HttpReward:
    """Scores from the user's reward server (module docstring); ``options``:
    :class:`steadyrl.config.reward_options.HttpOptions`, whose names and defaults they are, grouped
    once into the reward's parameter objects."""
    from ..config.reward_options import checked_options  # steadyrl.config imports the rewards

    o = checked_options("http", options)
    return HttpReward(Endpoint(o.url, o.api_key_env, o.check_url, o.headers), RequestLimits.of(o), Caching.of(o),
                      batch_size=o.batch_size, columns=o.columns)
