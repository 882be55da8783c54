"""Notes on settings that are valid but are probably not what the user meant.

Nothing here changes the config (no key silently rewrites another): ``steadyrl train`` prints
each note once at the start, and ``steadyrl config show`` prints them above the config. Each note
names the keys, their values, and what to set instead.
"""

from __future__ import annotations

from .presets import ALGORITHM_PRESETS
from .schema import Config

GSPO_CLIP_HINT = 0.01
"""A GSPO clip range at or above this barely clips: the length-normalised sequence ratio moves
about as much as a token ratio divided by the response length (the paper uses 3e-4 / 4e-4)."""


ESTIMATOR_OPTIONS: dict[str, tuple[str, ...]] = {
    "gae": ("gamma", "lam"), "grpo": ("norm_by_std", "group_stats"), "rloo": ("group_stats",),
    "reinforce_plus_plus": ("gamma",), "reinforce_plus_plus_baseline": ("group_stats",),
    "grpo_passk": ("norm_by_std",),
}
"""The ``algorithm.*`` settings each advantage estimator takes (the others take none); the registry
in :mod:`steadyrl.functional.advantages` declares the same (a test keeps the two equal: the config
imports no torch)."""

CRITIC_ESTIMATORS = ("gae",)
"""The estimators that train a value model (``algorithm.value_clip`` applies to them only)."""


def _user_set(algo) -> set[str]:
    """The ``algorithm`` keys set in the config or on the command line, not by its preset (a key
    set to the preset's own value counts as the preset's)."""
    preset = ALGORITHM_PRESETS.get(algo.preset, {})
    return {k for k in algo.model_fields_set if k not in preset or preset[k] != getattr(algo, k)}


def _ignored(algo) -> list[tuple[str, str]]:
    """``(key, why it has no effect)`` for each algorithm key whose value the resolved config ignores."""
    out = []
    kl_off = "algorithm.kl_mode is none" + (f" (the {algo.preset} preset's)" if algo.kl_mode == "none"
                                             and "kl_mode" not in _user_set(algo) else "")
    for key in ("kl_coef", "kl_estimator", "kl_target", "kl_horizon"):
        if algo.kl_mode == "none":
            out.append((key, f"{kl_off}: no KL term; set algorithm.kl_mode=loss (TRL's beta: a k3 loss term) "
                             "or reward"))
    if algo.kl_mode != "none" and algo.kl_target is None:
        out.append(("kl_horizon", "algorithm.kl_target is null (a fixed kl_coef, no adaptive controller)"))
    takes = ESTIMATOR_OPTIONS.get(algo.advantage_estimator, ())
    for key in ("gamma", "lam", "norm_by_std"):
        if key not in takes:
            users = sorted(name for name, opts in ESTIMATOR_OPTIONS.items() if key in opts)
            out.append((key, f"algorithm.advantage_estimator={algo.advantage_estimator} does not take it "
                             f"(only {', '.join(users)})"))
    if algo.advantage_estimator not in CRITIC_ESTIMATORS:
        out.append(("value_clip", f"algorithm.advantage_estimator={algo.advantage_estimator} trains no value "
                                  "model (only gae does)"))
    if not algo.dual_clip:
        out.append(("dual_clip_c", "algorithm.dual_clip is false"))
    if not algo.dynamic_sampling:
        out += [(key, "algorithm.dynamic_sampling is false")
                for key in ("dynamic_sampling_filter", "dynamic_sampling_max_draws")]
    if algo.loss_agg_mode != "seq-mean-token-sum-norm":
        out.append(("norm_length", f"algorithm.loss_agg_mode={algo.loss_agg_mode} (only "
                                   "seq-mean-token-sum-norm divides by a constant length)"))
    return out


def ignored_notes(config: Config) -> list[str]:
    """A note for each algorithm key you set whose value has no effect in the resolved config
    (``algorithm.preset: dr_grpo`` with ``kl_coef: 0.04``: the preset's ``kl_mode`` is none)."""
    algo = config.algorithm
    mine = _user_set(algo)
    seen, notes = set(), []
    for key, why in _ignored(algo):
        if key in mine and key not in seen:
            seen.add(key)
            notes.append(f"algorithm.{key}={getattr(algo, key)} has no effect: {why}")
    return notes


def config_notes(config: Config) -> list[str]:
    """One line per setting that is valid but probably unintended."""
    algo = config.algorithm
    notes = list(config._renamed_notes) + ignored_notes(config)
    preset = ALGORITHM_PRESETS.get(algo.preset, {})
    if "advantage_estimator" in preset and algo.advantage_estimator != preset["advantage_estimator"]:
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
