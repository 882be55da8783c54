"""Notes on settings that are valid but are probably not what the user meant.

Nothing here changes the config (no key silently rewrites another): ``steadyrl train`` prints
each note once at the start, and ``steadyrl config show`` prints them above the config. Each note
names the keys, their values, and what to set instead.
"""

from __future__ import annotations

from pydantic import BaseModel

from .inert import CRITIC_ESTIMATORS, ESTIMATOR_OPTIONS, inert_notes
from .presets import ALGORITHM_PRESETS
from .schema import Config

__all__ = ["CRITIC_ESTIMATORS", "ESTIMATOR_OPTIONS", "GSPO_CLIP_HINT", "config_notes", "ignored_notes",
           "user_written"]

GSPO_CLIP_HINT = 0.01
"""A GSPO clip range at or above this barely clips: the length-normalised sequence ratio moves
about as much as a token ratio divided by the response length (the paper uses 3e-4 / 4e-4)."""


def _set_on_models(model, prefix: str = "") -> set[str]:
    """The dotted keys set on a config built in code (not by :func:`load_config`)."""
    out = set()
    for name in model.model_fields_set:
        value = getattr(model, name)
        out |= _set_on_models(value, f"{prefix}{name}.") if isinstance(value, BaseModel) else {f"{prefix}{name}"}
    return out


def user_written(config: Config) -> set[str]:
    """The dotted keys the user wrote (:mod:`.inert`): recorded at load, else those set on the models."""
    written = config._written
    return set(written) if written is not None else _set_on_models(config)


def ignored_notes(config: Config) -> list[str]:
    """A note for each key you wrote whose value cannot act in the resolved config, with why and
    what makes it act (``algorithm.preset: dr_grpo`` with ``kl_coef: 0.04``: the preset's
    ``kl_mode`` is none). The rules are :data:`steadyrl.config.inert.RULES`."""
    return inert_notes(config, user_written(config))


def config_notes(config: Config) -> list[str]:
    """One line per setting that is valid but probably unintended."""
    algo = config.algorithm
    notes = list(config._renamed_notes) + ignored_notes(config)
    preset = ALGORITHM_PRESETS.get(algo.preset, {})
    if ("algorithm.preset" in user_written(config) and "advantage_estimator" in preset
            and algo.advantage_estimator != preset["advantage_estimator"]):
        notes.append(
            f"algorithm.preset={algo.preset} but algorithm.advantage_estimator={algo.advantage_estimator} is "
            f"set (the preset's is {preset['advantage_estimator']}), and a key you set wins over the preset. "
            "If this config is a run's saved config.yaml (it holds every key), keep only algorithm.preset "
            "in its algorithm section to switch algorithm")
    if algo.policy_loss == "gspo":
        if max(algo.clip_low, algo.clip_high) >= GSPO_CLIP_HINT:
            notes.append(
                f"algorithm.policy_loss=gspo with clip ranges {algo.clip_low:g} / {algo.clip_high:g}: a "
                "sequence ratio moves far less than a token ratio, so these barely clip; the GSPO paper "
                "uses 3e-4 / 4e-4 (algorithm.preset=gspo sets them, or set algorithm.pg_clip_low / "
                "pg_clip_high)")
        if algo.loss_agg_mode == "token-mean":
            notes.append(
                "algorithm.policy_loss=gspo with algorithm.loss_agg_mode=token-mean weights each sequence "
                "by its length; GSPO averages per sequence (seq-mean-token-mean, set by algorithm.preset=gspo)")
    if algo.policy_loss == "cispo" and algo.clip_low < 1.0:
        notes.append(
            f"algorithm.policy_loss=cispo with a lower clip range of {algo.clip_low:g}: the importance "
            f"weight is kept above {1 - algo.clip_low:g}; CISPO usually has no lower bound "
            "(algorithm.pg_clip_low=1, set by algorithm.preset=cispo, with pg_clip_high 0.28)")
    return notes
