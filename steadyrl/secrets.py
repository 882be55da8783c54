"""Secrets in a config: kept out of every file, tracker and message, and given by environment variable.

A reward's ``options`` may hold a credential (an ``api_key`` for a judge model, an
``Authorization`` header). Wherever a config is written (``config.yaml``, ``steadyrl config
show``, the trackers' hyperparameters) it goes through :func:`redact_secrets`, which replaces
with :data:`REDACTED`, at any depth:

* the value of a secret-looking key: its last word (after ``_`` or ``-``, case ignored) is
  ``token``, ``secret``, ``password``, ``passwd``, ``credential(s)``, ``auth``, ``authorization``
  or ``cookie``, or it ends in ``api_key`` / ``apikey``, ``access_key``, ``secret_key`` or
  ``private_key`` (``hf_token``, ``openai_api_key``, ``client_secret``, ``Authorization``,
  ``X-Api-Key``; not ``max_tokens`` nor ``prompt_key``);
* any text that contains a secret's value, wherever it is (by value, not by name): the values
  of those keys in the same data, and the credentials this process read from the environment
  (:class:`Secret`): an ``api_key_env``'s, and an ``{env: NAME}``'s under a secret-looking key
  or in a reward's ``headers``. (An ``{env: NAME}`` of an ordinary option - a model name, a
  device - is not looked for in other text: ``cuda`` is not a secret.)

The way to pass a secret without writing it anywhere is an environment variable:
``options: {api_key: {env: JUDGE_API_KEY}}`` is read when the reward is built
(:func:`resolve_env_options`, at any depth: ``headers: {Authorization: {env: AUTH}}`` too), and
the config files keep ``{env: JUDGE_API_KEY}``. The value read is a :class:`Secret`: its
``repr`` and ``str`` are :data:`REDACTED`, so a reward spec, a reward's options or a traceback
that prints one shows nothing; the text itself is taken out (:func:`reveal`) only where it is
sent: when a user function is called, and in the HTTP request of the built-ins.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

from .sandbox.limits import hide_env_name

__all__ = ["REDACTED", "Secret", "is_env_reference", "is_secret_name", "redact_secrets", "redact_text",
           "redacting_excepthook", "resolve_env_options", "reveal", "secret_values"]

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 8
"""Shorter values are not looked for by value (``"1"`` would redact every number)."""

_SECRET_NAME = re.compile(r"(?:^|[_-])(?:token|secret|password|passwd|credentials?|auth|authorization|cookie)$"
                          r"|(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key)$", re.IGNORECASE)
_KNOWN: set[str] = set()
_KNOWN_LOCK = threading.Lock()


class Secret:
    """A secret text whose ``repr`` / ``str`` / format are :data:`REDACTED`; :func:`reveal` (or
    :meth:`reveal`) gives the text. With ``remember`` (a credential), the value is also
    looked for by value in any text :func:`redact_secrets` / :func:`redact_text` write."""

    __slots__ = ("_value",)

    def __init__(self, value: str, remember: bool = True):
        if isinstance(value, Secret):
            value = value.reveal()
        self._value = str(value)
        if remember and len(self._value) >= MIN_SECRET_CHARS:
            with _KNOWN_LOCK:
                _KNOWN.add(self._value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return REDACTED

    def __radd__(self, other: str) -> "Secret":  # "Bearer " + key stays a secret
        return Secret(str(other) + self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self):  # a worker process gets the secret (it is sent there), still wrapped
        return Secret, (self._value,)


def reveal(data: Any) -> Any:
    """``data`` with every :class:`Secret` replaced by its text, at any depth (dicts, lists, tuples)."""
    if isinstance(data, Secret):
        return data.reveal()
    if isinstance(data, dict):
        return {k: reveal(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(reveal(v) for v in data)
    return data


def is_secret_name(name: Any) -> bool:
    """Whether an option named ``name`` holds a secret (see the module docstring)."""
    return isinstance(name, str) and bool(_SECRET_NAME.search(name))


def is_env_reference(value: Any) -> bool:
    """``{env: NAME}``: an option whose value is read from the environment variable ``NAME``."""
    return isinstance(value, dict) and list(value) == ["env"] and isinstance(value["env"], str)


def _named_values(data: Any, out: set[str]) -> set[str]:
    """The text values of the secret-looking keys in ``data``, at any depth (:func:`secret_values`)."""
    if isinstance(data, dict):
        for k, v in data.items():
            if is_secret_name(k) and isinstance(v, (str, int)) and not isinstance(v, bool) \
                    and len(str(v)) >= MIN_SECRET_CHARS and str(v) != REDACTED:
                out.add(str(v))
            _named_values(v, out)
    elif isinstance(data, (list, tuple)):
        for v in data:
            _named_values(v, out)
    return out


def redact_text(text: str, also: set[str] = frozenset()) -> str:
    """``text`` with every secret value this process has read (and those in ``also``) replaced
    by :data:`REDACTED`; the longest first, so that one value inside another goes whole."""
    with _KNOWN_LOCK:
        values = _KNOWN | set(also)
    for value in sorted(values, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def _redact(data: Any, values: set[str]) -> Any:
    if isinstance(data, Secret):
        return REDACTED
    if isinstance(data, dict):
        return {k: REDACTED if is_secret_name(k) and v is not None and not is_env_reference(v)
                else _redact(v, values) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_redact(v, values) for v in data)
    if isinstance(data, str):
        return redact_text(data, values)
    return data


def secret_values(data: Any) -> set[str]:
    """The values of the secret-looking keys in ``data`` (plain config data), at any depth: what
    :func:`redact_secrets` also looks for by value."""
    return _named_values(data, set())


def redact_secrets(data: Any, also: set[str] = frozenset()) -> Any:
    """A copy of ``data`` (plain config data) with every secret replaced by :data:`REDACTED`, by
    key name and by value (see the module docstring; ``also``: more values to look for, those of
    the whole config when ``data`` is a part of it); ``{env: NAME}`` references and nulls are
    kept (they hold no secret)."""
    return _redact(data, _named_values(data, set(also)))


def _resolve(value: Any, path: str, where: str, credential: bool) -> Any:
    if is_env_reference(value):
        name = value["env"]
        if name not in os.environ:
            raise ValueError(f"{where}: option {path!r} = {{env: {name}}} but the environment variable "
                             f"{name} is not set; export it before starting the run")
        hide_env_name(name)  # whatever it is called, no sandbox worker gets it from its environment
        return Secret(os.environ[name], remember=credential)
    if isinstance(value, dict):
        headers = path.rsplit(".", 1)[-1] == "headers"
        return {k: _resolve(v, f"{path}.{k}", where, credential or headers or is_secret_name(k))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, f"{path}[{i}]", where, credential) for i, v in enumerate(value)]
    if value == REDACTED:
        key = re.split(r"[.\[]", path)[-1].rstrip("]")
        raise ValueError(f"{where}: option {path!r} is {REDACTED!r}: a secret is never written to "
                         f"config.yaml, so it cannot come back from there; give it as an environment "
                         f"variable in the config you resume with, {key}: {{env: VAR_NAME}} "
                         f"(docs/rewards.md)")
    return value


def resolve_env_options(options: dict[str, Any], where: str) -> dict[str, Any]:
    """``options`` with each ``{env: NAME}``, at any depth, replaced by the variable's value as a
    :class:`Secret`.

    Raises ``ValueError`` (``where`` names the reward) for an unset variable, and for a
    :data:`REDACTED` value: a run's ``config.yaml`` never holds the secret itself, so resuming
    from it needs the secret given as ``{env: NAME}``."""
    return {key: _resolve(value, key, where, is_secret_name(key)) for key, value in options.items()}


def redacting_excepthook(kind, value, tb) -> None:
    """``sys.excepthook`` of the ``steadyrl`` command: a crash's traceback (exit status 1) printed
    with every known secret redacted by value, as every other message is."""
    import sys
    import traceback

    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.write(redact_text(text))
    sys.stderr.flush()
