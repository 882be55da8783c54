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
- The 19 keys of multi-turn episodes moved from ``rollout`` to ``rollout.multi_turn`` (0.1.0):
  ``rollout.max_turns`` is ``rollout.multi_turn.max_turns`` and so on for each of
  :data:`MULTI_TURN_KEYS`, and ``rollout.multi_turn_mode`` is ``rollout.multi_turn.mode``. One note
  names every old key a config used; an old key and its new name both set in the file, or both on the
  command line, is an error. The file's old keys move before the command line's keys are set, and a
  command-line key moves to its new name as it is set (:func:`new_path`), so an override in either name
  replaces the file's value in either name, as an override always did (resuming a run saved before 0.1.0
  with ``rollout.multi_turn.max_turns=5``).
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import ConfigError

__all__ = ["MULTI_TURN_KEYS", "RENAMED_KEYS", "apply_renames", "move_multi_turn", "multi_turn_note", "new_path",
           "old_names_in", "renamed_copy"]

MULTI_TURN_KEYS: dict[str, str] = {old: old for old in (
    "tools", "tool_parser", "environment", "agent", "agent_concurrency", "agent_timeout_s", "observation_role",
    "turn_reward", "max_turns", "max_observation_tokens", "observation_truncation", "max_episode_tokens",
    "tool_timeout_s", "max_tool_calls_per_turn", "tool_time_budget_s", "tool_isolation", "tool_workers",
    "tool_limits")} | {"multi_turn_mode": "mode"}
"""Old ``rollout.<key>`` -> its name under ``rollout.multi_turn``."""

RENAMED_KEYS: dict[str, str] = {
    "rollout.vllm.tis_cap": "rollout.tis_cap",
    "rollout.asynchronous.tis_cap": "rollout.tis_cap",
    **{f"rollout.{old}": f"rollout.multi_turn.{new}" for old, new in MULTI_TURN_KEYS.items()},
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


def move_multi_turn(raw: dict[str, Any]) -> list[str]:
    """Move the old multi-turn keys of ``raw`` (changed in place) under ``rollout.multi_turn``; returns the
    old names found. An old key and its new name both set in ``raw`` is an error naming both."""
    rollout = _section(raw, "rollout")
    found = [old for old in MULTI_TURN_KEYS if rollout is not None and old in rollout]
    if not found:
        return []
    section = rollout.setdefault("multi_turn", {})
    if section is None:  # `multi_turn:` with nothing under it, as YAML reads an empty section
        section = rollout["multi_turn"] = {}
    if not isinstance(section, dict):
        raise ConfigError(f"rollout.multi_turn = {section!r} is the section of the multi-turn keys (a mapping), "
                          f"and {', '.join(f'rollout.{old}' for old in found)} (its keys' old names) are set too; "
                          "write them under rollout.multi_turn")
    both = [old for old in found if MULTI_TURN_KEYS[old] in section]
    if both:
        pairs = ", ".join(f"rollout.{old} and rollout.multi_turn.{MULTI_TURN_KEYS[old]}" for old in both)
        raise ConfigError(f"{pairs} are both set: the first is the old name of the second; set only "
                          "rollout.multi_turn." + MULTI_TURN_KEYS[both[0]])
    for old in found:
        section[MULTI_TURN_KEYS[old]] = rollout.pop(old)
    return found


def multi_turn_note(found: list[str]) -> list[str]:
    """The one deprecation note naming the old multi-turn keys ``found`` (none: no note)."""
    if not found:
        return []
    moved = ", ".join(f"rollout.{old} -> rollout.multi_turn.{MULTI_TURN_KEYS[old]}" for old in dict.fromkeys(found))
    return [f"the multi-turn keys moved under rollout.multi_turn (deprecated names, read with the same meaning): "
            f"{moved}; write them there (`steadyrl config show` prints the config with the new names)"]


def new_path(keys: list[str]) -> list[str]:
    """A command-line key's path at its new name (``rollout.max_turns`` -> ``rollout.multi_turn.max_turns``,
    ``rollout.tool_limits.memory_mb`` -> ``rollout.multi_turn.tool_limits.memory_mb``); others unchanged."""
    if len(keys) >= 2 and keys[0] == "rollout" and keys[1] in MULTI_TURN_KEYS:
        return ["rollout", "multi_turn", MULTI_TURN_KEYS[keys[1]], *keys[2:]]
    return keys


def old_names_in(section: str) -> dict[str, str]:
    """For the unknown-key hint of a key in ``section`` (``rollout``, ``rollout.multi_turn``): each old name
    a typo there may be close to (``rollout.max_turns``; ``rollout.multi_turn.multi_turn_mode``, the old
    name written inside the section) -> the key to suggest, its new name."""
    if section == "rollout":
        return {f"rollout.{old}": f"rollout.multi_turn.{new}" for old, new in MULTI_TURN_KEYS.items()}
    if section == "rollout.multi_turn":
        return {f"rollout.multi_turn.{old}": f"rollout.multi_turn.{new}" for old, new in MULTI_TURN_KEYS.items()
                if old != new}
    return {}


def _multi_turn(raw: dict[str, Any]) -> list[str]:
    return multi_turn_note(move_multi_turn(raw))


_RENAMES = (_tis_cap, _multi_turn)


def apply_renames(raw: dict[str, Any]) -> list[str]:
    """Move every old key of ``raw`` (changed in place) to its new name; one note per rename."""
    return [note for rename in _RENAMES for note in rename(raw)]


def renamed_copy(raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``raw`` with every old key at its new name (``raw`` unchanged): how a saved config
    written before a rename is compared, key by key, with the config loaded from it."""
    copy_ = copy.deepcopy(raw)
    for rename in _RENAMES:
        try:
            rename(copy_)
        except ConfigError:
            pass  # an old and a new name both set: a config loaded from it was refused already
    return copy_
