"""A small JSON-over-HTTP client for rewards that call a server (``llm_judge``'s OpenAI-compatible
backend, ``http``): retries with exponential back-off, a per-request time limit, failures sorted by
reason. Standard library only (``urllib.request``).

One request (:func:`post_json`) is tried ``1 + retries`` times. A retry follows, after a pause of::

    pause_k = min(backoff_s * 2**k, MAX_BACKOFF_S)      (k = 0, 1, ...; a 429's Retry-After, capped
                                                         the same way, wins when it is longer)

a *transient* failure: HTTP 429, HTTP 5xx, or a connection error (refused, reset, DNS). Anything
else fails at once: an HTTP 4xx other than 429 (a wrong model name, a bad key: retrying cannot
help), a reply that is not JSON, and a request that ran past ``timeout_s`` (the server is up but
stuck: waiting again would multiply the wait, not shorten it).

The failure reasons (:data:`REASONS`) become the reward's ``reward/<name>/failures/<reason>``
metrics: ``timeout``, ``connection``, ``http_429``, ``http_5xx``, ``http_4xx``, ``bad_reply`` (not
JSON, or JSON of the wrong shape: the caller raises it too); and, raised by the rewards themselves,
``parse`` (a judge's reply without a score), ``out_of_range`` (a judge's score outside its range),
``no_answer`` (a judge template asks for ``{answer}`` and the sample has none), ``server_none`` (a
reward server's own ``null`` / non-finite score).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..secrets import Secret, reveal
from ..reward_specs import VALID_URL, url_problem  # noqa: F401 - re-exported

__all__ = ["REASONS", "RequestFailed", "post_json", "url_problem", "checked_url", "check_reachable", "api_key_from_env",
           "MAX_BACKOFF_S", "VALID_URL"]

REASONS = ("timeout", "connection", "http_429", "http_5xx", "http_4xx", "bad_reply", "parse", "out_of_range",
           "no_answer", "server_none")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_BACKOFF_S = 30.0
"""Longest pause between two tries."""


class RequestFailed(Exception):
    """A request that failed for good; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def _classify(err: Exception) -> tuple[str, bool]:
    """``(reason, transient)`` of a failed try."""
    if isinstance(err, urllib.error.HTTPError):
        if err.code == 429:
            return "http_429", True
        return ("http_5xx", True) if err.code >= 500 else ("http_4xx", False)
    if isinstance(err, (TimeoutError, socket.timeout)):
        return "timeout", False
    if isinstance(err, urllib.error.URLError) and isinstance(err.reason, (TimeoutError, socket.timeout)):
        return "timeout", False
    return "connection", True  # URLError (refused, DNS), ConnectionError, http.client errors


def _retry_after(err: Exception) -> float:
    if isinstance(err, urllib.error.HTTPError) and err.headers is not None:
        try:
            return float(err.headers.get("Retry-After") or 0.0)
        except ValueError:
            return 0.0
    return 0.0


def _try_once(url: str, data: bytes, headers: dict, timeout_s: float):
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as reply:
        body = reply.read()
    try:
        return json.loads(body)
    except ValueError:
        raise RequestFailed("bad_reply", f"the reply is not JSON: {body[:80]!r}") from None


def post_json(url: str, body, *, headers: dict | None = None, timeout_s: float = 30.0, retries: int = 3,
              backoff_s: float = 1.0, sleep=time.sleep):
    """POST ``body`` as JSON to ``url`` and return the decoded JSON reply; raises
    :class:`RequestFailed` once the tries are spent (see the module docstring)."""
    data = json.dumps(body, default=str).encode()
    # the one place a header's secret is revealed: the request that sends it
    headers = {"Content-Type": "application/json", **reveal(headers or {})}
    for attempt in range(retries + 1):
        try:
            return _try_once(url, data, headers, timeout_s)
        except RequestFailed:
            raise
        except Exception as err:  # noqa: BLE001 - every network failure is sorted, none escapes raw
            reason, transient = _classify(err)
            if not transient or attempt == retries:
                http = isinstance(err, urllib.error.HTTPError)
                detail = f"HTTP {err.code}" if http else str(err) or type(err).__name__
                raise RequestFailed(reason, f"{detail} (after {attempt + 1} tries)") from None
            pause = max(min(backoff_s * 2 ** attempt, MAX_BACKOFF_S), min(_retry_after(err), MAX_BACKOFF_S))
            sleep(pause)
    raise AssertionError("unreachable")


def checked_url(field: str, url) -> str:
    """``url`` (stripped) when :func:`url_problem` finds nothing, else a :class:`ConfigError`
    ``<field> = <url>: <problem>; valid: ...``."""
    problem = url_problem(url)
    if problem is not None:
        raise ConfigError(f"{field} = {url!r}: {problem}; valid: {VALID_URL}")
    return url.strip()


def check_reachable(field: str, url: str, timeout_s: float = 3.0) -> None:
    """A TCP connect to ``url``'s host and port, so that a typo or a server that is not up stops
    the run at start-up (:class:`ConfigError` naming ``field``), not as failures on every step."""
    parts = urlsplit(checked_url(field, url))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as err:
        raise ConfigError(f"{field} = {url!r}: cannot connect to {parts.hostname}:{port} within {timeout_s:g} s "
                          f"({err.strerror or err}); is the server running? (set the option check_url: false "
                          "to skip this start-up check)") from None


def api_key_from_env(reward: str, env) -> Secret:
    """The API key held by the environment variable *named* ``env`` (option ``api_key_env``), as a
    :class:`~steadyrl.secrets.Secret` (never shown; revealed by :func:`post_json` when sent)."""
    if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
        # it may be the key itself, pasted by mistake: never echo it
        raise ConfigError(f"{reward} reward: option api_key_env must be the NAME of an environment variable that "
                          "holds the key (e.g. OPENAI_API_KEY), not the key itself")
    key = os.environ.get(env)
    if not key:
        raise ConfigError(f"{reward} reward: option api_key_env={env!r} names an environment variable that is not "
                          "set (or is empty); export it before starting the run")
    return Secret(key)
