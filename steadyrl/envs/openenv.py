"""OpenEnv environments: ``rollout.multi_turn.environment: openenv:<base_url>[?options]``.

An OpenEnv environment is a server (a Docker image, a Hugging Face Space, or ``uvicorn`` on your
machine) speaking OpenEnv's protocol; steadyrl talks to it with ``openenv-core``'s own client
(``GenericEnvClient``: a WebSocket session per episode, so each episode has its own environment
state on the server). Each episode: ``reset`` (with the episode's seed), then one ``step`` per
policy turn with the turn's text as one field of the action, until the server says ``done``.
Options:

* ``action_key`` (default ``message``): the action field that carries the policy's text (echo
  and TextArena servers take ``message``, the coding server ``code``);
* ``observation_key`` (default: automatic): the observation field shown to the policy; automatic
  means the one text field when the observation has exactly one (besides ``done``, ``reward``,
  ``metadata``), else all its fields as JSON;
* ``image_key`` (default none): the observation field holding an image, a ``data:image/...;base64,``
  URL, shown after the text as an ``image_url`` part (a vision-language policy's episodes decode
  and check it; docs/agents.md, "Images in observations");
* ``seed`` (default ``true``): pass the episode's seed to ``reset`` (``false`` for a server that
  refuses one);
* ``timeout_s`` (default 60): the client's limit for one reply.

At start-up the server's ``/schema`` is read (so a server that is not running, or an
``action_key`` its actions do not have, stops the run with exit 2 before any model loads). The
server is not started or stopped by steadyrl. The reply is read with limits, as any input from
a server: at most :data:`SCHEMA_MAX_BYTES` within the time limit, a JSON object nested at most
as deep as Python reads, with ``action.properties`` a mapping and ``action.required`` a list of
names; anything else is exit 2 naming the server's ``/schema``, never a traceback or a hang.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from .options import OpenEnvServer
from ..errors import ConfigError
from ..printable import printable
from .spec import parse_spec, require, take

KEY = "rollout.multi_turn.environment"
HIDDEN = ("done", "reward", "metadata")
"""Observation fields that are not shown to the policy (the driver gets done and reward itself)."""


SCHEMA_MAX_BYTES = 1 << 20
"""The most of a ``/schema`` reply read (OpenEnv's are a few kilobytes)."""


def _read_capped(reply, url: str, where: str, timeout_s: float) -> bytes:
    """The reply's body: at most :data:`SCHEMA_MAX_BYTES`, all of it within ``timeout_s``."""
    deadline, parts, size = time.monotonic() + timeout_s, [], 0
    while True:
        chunk = reply.read(1 << 16)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
        if size > SCHEMA_MAX_BYTES:
            raise ConfigError(f"{where}: the OpenEnv server's {url} sent more than {SCHEMA_MAX_BYTES:,} bytes; "
                              "a schema is a small JSON object: is this an OpenEnv server?")
        if time.monotonic() > deadline:
            raise ConfigError(f"{where}: the OpenEnv server's {url} did not finish its reply within {timeout_s:g} s")


def _schema(base_url: str, where: str, timeout_s: float) -> dict:
    url = base_url.rstrip("/") + "/schema"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            body = _read_capped(reply, url, where, timeout_s)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ConfigError(f"{where}: cannot read the OpenEnv server's {url} ({printable(err, keep='')}); "
                          "start the server first (docs/environments.md)") from None
    try:
        schema = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as err:  # not UTF-8 / JSON; arrays nested thousands deep
        why = "nested too deep" if isinstance(err, RecursionError) else printable(str(err)[:200], keep="")
        raise ConfigError(f"{where}: the OpenEnv server's {url} is not a JSON object ({why})") from None
    return _checked_schema(schema, url, where)


def _checked_schema(schema, url: str, where: str) -> dict:
    """``schema`` with the shape :func:`check_server` reads: a mapping whose ``action`` is a mapping
    with ``properties`` a mapping and ``required`` a list of texts (each optional)."""
    def bad(what: str) -> ConfigError:
        return ConfigError(f"{where}: the OpenEnv server's {url} {what}; expected a JSON object such as "
                           '{"action": {"properties": {"message": ...}, "required": [...]}}')

    if not isinstance(schema, dict):
        raise bad(f"is a JSON {type(schema).__name__}, not an object")
    action = schema.get("action", {})
    if not isinstance(action, dict):
        raise bad(f"has an 'action' that is a {type(action).__name__}")
    if not isinstance(action.get("properties", {}), dict):
        raise bad("has 'action.properties' that is not an object")
    required = action.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise bad("has 'action.required' that is not a list of field names")
    return schema


def observation_content(observation: dict, key: str | None, image_key: str | None = None) -> str | list | None:
    """What the policy is shown of an OpenEnv observation: its text (:func:`observation_text`, the
    image field left out), then the ``image_key`` field's image as an ``image_url`` part when it
    has one (module docstring)."""
    image = observation.get(image_key) if image_key is not None else None
    text = observation_text({k: v for k, v in observation.items() if k != image_key}, key)
    if not image:
        return text
    return ([{"type": "text", "text": text}] if text else []) + [{"type": "image_url", "image_url": {"url": image}}]


def observation_text(observation: dict, key: str | None) -> str | None:
    """What the policy is shown of an OpenEnv observation (module docstring)."""
    if key is not None:
        value = observation.get(key)
        return None if value is None else value if isinstance(value, str) else json.dumps(value)
    shown = {k: v for k, v in observation.items() if k not in HIDDEN}
    texts = [v for v in shown.values() if isinstance(v, str)]
    if len(shown) == 1 and len(texts) == 1:
        return texts[0] or None
    return json.dumps(shown, sort_keys=True) if shown else None


def check_server(text: str) -> dict:
    """The settings of an ``openenv:`` spec, checked against the server's schema."""
    spec = parse_spec(text, KEY)
    where = spec.where(KEY)
    require("openenv", where)
    parts = urlsplit(spec.target)
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ConfigError(f"{where}: {spec.target!r} is not a server URL; valid: http://host:port (the server's "
                          "base URL, no query)")
    options = dict(spec.options)
    settings = {"base_url": spec.target,
                **{name: take(options, name, spec, KEY, OpenEnvServer) for name in OpenEnvServer.model_fields}}
    settings["timeout_s"] = float(settings["timeout_s"])
    if options:
        raise ConfigError(f"{where}: unknown option(s) {sorted(options)}; valid: action_key, observation_key, "
                          "image_key, seed, timeout_s")
    http = spec.target.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
    action = _schema(http, where, min(settings["timeout_s"], 10.0)).get("action", {})
    fields = sorted(action.get("properties", {}))
    if fields and settings["action_key"] not in fields:
        shown = printable(fields[:20], keep="")[:500]
        raise ConfigError(f"{where}: option action_key={settings['action_key']!r}, but the server's actions have "
                          f"the fields {shown}; set action_key to the one that takes the policy's text")
    required = [f for f in action.get("required", []) if f != settings["action_key"]]
    if required:
        shown = printable(required[:20], keep="")[:500]
        raise ConfigError(f"{where}: the server's actions also require {shown}; steadyrl fills only "
                          f"action_key={settings['action_key']!r} with the policy's text")
    return settings


class OpenEnvEpisode:
    """One episode on an OpenEnv server (module docstring); ``settings`` is set on a subclass per spec."""

    settings: dict = {}

    def reset(self, seed=None, **row):
        from openenv.core import GenericEnvClient

        s = self.settings
        client = GenericEnvClient(base_url=s["base_url"], connect_timeout_s=min(s["timeout_s"], 10.0),
                                  message_timeout_s=s["timeout_s"])
        # openenv-core 0.2.1's client is synchronous; from 0.2.3 it is async and .sync() wraps it
        self.client = client.sync() if hasattr(client, "sync") else client
        self.client.connect()
        result = self.client.reset(**({"seed": int(seed)} if s["seed"] and seed is not None else {}))
        return observation_content(result.observation or {}, s["observation_key"], s["image_key"])

    def step(self, text: str):
        result = self.client.step({self.settings["action_key"]: text})
        s = self.settings
        return observation_content(result.observation or {}, s["observation_key"], s["image_key"]), result.reward, \
            result.done

    def close(self):
        client, self.client = getattr(self, "client", None), None
        if client is not None:
            client.close()


def environment_class(text: str) -> type:
    """The class for ``rollout.multi_turn.environment = 'openenv:<base_url>[?options]'``, the server checked."""
    return type("OpenEnvEpisode_", (OpenEnvEpisode,), {"settings": check_server(text), "__module__": __name__})
