"""Config keys steadyrl itself renamed: the old name keeps working, with a deprecation note.

:func:`apply_renames` runs on the raw config (the YAML plus the overrides) before anything is
validated: it moves each old key's value to its new key, or drops the old key where its value
never applied, and returns one note per old key found. The notes reach the user through
:func:`steadyrl.config.config_notes`, printed once at the start of a run and by
``steadyrl config show``. A run directory's saved config.yaml written before a rename holds
the old keys; it loads (and resumes) with the same meaning.

Renamed so far:

- ``rollout.vllm.tis_cap`` (default null, used by the synchronous vLLM engine) and
  ``rollout.asynchronous.tis_cap`` (default 2.0, used with asynchronous rollouts) are one key,
  ``rollout.tis_cap``, whose default is the same rule: 2.0 with asynchronous rollouts, null
  (off) otherwise. Each old key moves to ``rollout.tis_cap`` where it used to apply and is
  dropped where it was ignored (``rollout.vllm.tis_cap`` with asynchronous rollouts, and
  ``rollout.asynchronous.tis_cap`` without them).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

__all__ = ["RENAMED_KEYS", "apply_renames"]

RENAMED_KEYS: dict[str, str] = {
    "rollout.vllm.tis_cap": "rollout.tis_cap",
    "rollout.asynchronous.tis_cap": "rollout.tis_cap",
}
"""Every old key name -> its new name (the pages may name an old key next to its new one)."""


def _section(raw: dict[str, Any], *keys: str) -> dict[str, Any] | None:
    node: Any = raw
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _tis_cap(raw: dict[str, Any]) -> list[str]:
    rollout = _section(raw, "rollout")
    if rollout is None:
        return []
    asynchronous = _section(rollout, "asynchronous") or {}
    is_async = asynchronous.get("max_staleness") is not None
    old = [("vllm", not is_async), ("asynchronous", is_async)]
    found = [(name, applies) for name, applies in old if "tis_cap" in (_section(rollout, name) or {})]
    if found and "tis_cap" in rollout:
        names = " and ".join(f"rollout.{name}.tis_cap" for name, _ in found)
        raise ConfigError(f"{names} and rollout.tis_cap are both set: {names} is the old name of "
                          "rollout.tis_cap; set only rollout.tis_cap")
    notes = []
    for name, applies in found:
        value = rollout[name].pop("tis_cap")
        if applies:
            rollout["tis_cap"] = value
            what = f"read as rollout.tis_cap={value}"
        else:
            what = ("ignored, as before: it applies only " +
                    ("without" if name == "vllm" else "with") + " asynchronous rollouts")
        notes.append(f"rollout.{name}.tis_cap is deprecated, write rollout.tis_cap (one key for the vLLM "
                     f"engine and asynchronous rollouts; default 2.0 with asynchronous rollouts, else "
                     f"null); {what}")
    return notes


def apply_renames(raw: dict[str, Any]) -> list[str]:
    """Move every old key of ``raw`` (changed in place) to its new name; one note per old key."""
    return _tis_cap(raw)
