"""Secrets in a config: kept out of every file and tracker, and given by environment variable.

A reward's ``options`` may hold a credential (an ``api_key`` for a judge model). Wherever a
config is written (``config.yaml``, ``steadyrl config show``, the trackers' hyperparameters),
the value of a secret-looking key is replaced by :data:`REDACTED`. A key is secret-looking
when its last word (after ``_`` or ``-``, case ignored) is ``token``, ``secret``, ``password``,
``passwd``, ``credential(s)`` or ``auth``, or it ends in ``api_key`` / ``apikey``,
``access_key``, ``secret_key`` or ``private_key`` (``hf_token``, ``openai_api_key``,
``client_secret``; not ``max_tokens`` nor ``prompt_key``).

The way to pass a secret without writing it anywhere is an environment variable:
``options: {api_key: {env: JUDGE_API_KEY}}`` is replaced by the variable's value when the
reward is built (:func:`resolve_env_options`), and the config files keep ``{env: JUDGE_API_KEY}``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from .sandbox.limits import hide_env_name

__all__ = ["REDACTED", "is_env_reference", "is_secret_name", "redact_secrets", "resolve_env_options"]

REDACTED = "<redacted>"

_SECRET_NAME = re.compile(r"(?:^|[_-])(?:token|secret|password|passwd|credentials?|auth)$"
                          r"|(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key)$", re.IGNORECASE)


def is_secret_name(name: Any) -> bool:
    """Whether an option named ``name`` holds a secret (see the module docstring)."""
    return isinstance(name, str) and bool(_SECRET_NAME.search(name))


def is_env_reference(value: Any) -> bool:
    """``{env: NAME}``: an option whose value is read from the environment variable ``NAME``."""
    return isinstance(value, dict) and list(value) == ["env"] and isinstance(value["env"], str)


def redact_secrets(data: Any) -> Any:
    """A copy of ``data`` (plain config data) where every secret-looking key's value is
    :data:`REDACTED`, at any depth; ``{env: NAME}`` references and nulls are kept (they hold no
    secret)."""
    if isinstance(data, dict):
        return {k: REDACTED if is_secret_name(k) and v is not None and not is_env_reference(v)
                else redact_secrets(v) for k, v in data.items()}
    if isinstance(data, list):
        return [redact_secrets(v) for v in data]
    return data


def resolve_env_options(options: dict[str, Any], where: str) -> dict[str, Any]:
    """``options`` with each ``{env: NAME}`` replaced by the variable's value.

    Raises ``ValueError`` (``where`` names the reward) for an unset variable, and for a
    :data:`REDACTED` value: a run's ``config.yaml`` never holds the secret itself, so resuming
    from it needs the secret given as ``{env: NAME}``."""
    out = {}
    for key, value in options.items():
        if is_env_reference(value):
            name = value["env"]
            if name not in os.environ:
                raise ValueError(f"{where}: option {key!r} = {{env: {name}}} but the environment variable "
                                 f"{name} is not set; export it before starting the run")
            value = os.environ[name]
            hide_env_name(name)  # whatever it is called, no sandbox worker gets it from its environment
        elif value == REDACTED:
            raise ValueError(f"{where}: option {key!r} is {REDACTED!r}: a secret is never written to "
                             f"config.yaml, so it cannot come back from there; give it as an environment "
                             f"variable in the config you resume with, {key}: {{env: VAR_NAME}} "
                             f"(docs/rewards.md)")
        out[key] = value
    return out
