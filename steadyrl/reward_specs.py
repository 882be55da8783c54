"""What the config knows of a reward spec without loading it (pure Python, no torch): the short
name a spec is reported under (:func:`reward_name`) and the server URL options of the built-ins,
checked when the config is read (:func:`url_option_problems`) and again when the reward is built
(:mod:`steadyrl.rewards.loader`, :mod:`steadyrl.rewards.http_client`). They live here, below both
the config and the rewards, so that loading a config imports nothing of ``steadyrl.rewards`` and
importing the rewards loads no config (pydantic)."""

from __future__ import annotations

from urllib.parse import urlsplit

from .secrets import is_env_reference

__all__ = ["URL_OPTIONS", "VALID_URL", "reward_name", "url_option_problems", "url_problem"]

VALID_URL = "an http:// or https:// URL with a host, e.g. http://localhost:8000"


def url_problem(url) -> str | None:
    """Why ``url`` cannot be a server's address (scheme http or https, a host, a valid port), or
    None. The one check of every URL option (``http``'s ``url``, ``llm_judge``'s ``base_url``,
    ``code``'s ``url``): at config validation and again when the reward is built."""
    if not isinstance(url, str):
        return f"not a URL (a {type(url).__name__})"
    if not url.strip():
        return "an empty string"
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        return f"its scheme is {parts.scheme!r}, not http or https" if parts.scheme else "no scheme"
    if not parts.hostname:
        return "no host"
    try:
        parts.port
    except ValueError as err:
        return f"a bad port ({err})"
    return None


URL_OPTIONS = {"http": ("url",), "llm_judge": ("base_url",), "code": ("url",)}
"""The options of built-in rewards that name a server: each must be an http(s) URL with a host
(:func:`~steadyrl.rewards.http_client.url_problem`), whether or not ``check_url`` is on."""


def url_option_problems(name: str, options: dict) -> list[tuple[str, object, str]]:
    """``(option, value, what is wrong and what is valid)`` for each server URL option of built-in
    ``name`` that is not an http(s) URL with a host; an ``{env: NAME}`` value is checked when the
    reward is built, once the variable is read."""
    out = []
    for key in URL_OPTIONS.get(name.strip(), ()):
        value = options.get(key)
        if value is None or is_env_reference(value):
            continue
        problem = url_problem(value)
        if problem is not None:
            out.append((key, value, f"{problem}; valid: {VALID_URL}"))
    return out


def reward_name(spec: str) -> str:
    """A short name for a spec, for metrics: the built-in name or the function's name."""
    spec = spec.strip()
    return spec.rsplit(":", 1)[1].rsplit(".", 1)[-1] if ":" in spec else spec
