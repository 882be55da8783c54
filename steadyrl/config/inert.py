"""Which keys the user wrote, and which of them cannot act under the resolved config.

One rule for the load-time notes of :func:`steadyrl.config.config_notes`: a note names a key **the
user wrote** (in the config file or on the command line: not a default, not a preset's value, not
the built-in demo's) whose value cannot change the run, says why, and says what makes it act.

What the user wrote is recorded at load (:func:`written_keys`) and kept in a run's ``config.yaml``
on a comment line (:data:`WRITTEN_MARKER`), because that file holds every key, resolved: a
``--resume`` reads back what the user wrote at the start, not the 100 keys steadyrl filled in.

The rules are a table (:data:`RULES`): each entry is the keys it covers and a function of the
resolved config that returns why they cannot act, or None when they can. A key's first reason wins.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from .presets import ALGORITHM_PRESETS, DEFAULT_PRESET
from .renamed import RENAMED_KEYS
from .schema import Config

WRITTEN_MARKER = "# steadyrl-written-keys:"
"""The comment line of a run's ``config.yaml`` that lists the keys the user wrote (space-separated)."""

_HASH_MARKER = "# steadyrl-sha256:"  # the last line of every config.yaml steadyrl wrote (run.directory)
_KEY = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$")

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

LOSS_OPTIONS: dict[str, tuple[str, ...]] = {
    "sapo": ("sapo_tau_pos", "sapo_tau_neg"), "kl_cov": ("kl_cov_ratio", "kl_cov_coef"),
    "clip_cov": ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"),
}
"""The ``algorithm.*`` options each policy loss takes (the registry's ``POLICY_LOSS_OPTIONS``; a test
keeps the two equal)."""

CLIPPED_LOSSES = ("ppo", "gspo", "cispo", "clip_cov")
"""The policy losses that read ``pg_clip*`` (sapo, kl_cov and vanilla_pg clip nothing)."""

DUAL_CLIP_LOSSES = ("ppo", "gspo", "clip_cov")
"""The policy losses that apply the dual clip."""

RATIO_ONE_LOSSES = {
    "sapo": "its gate weight 4 sigma (1 - sigma) is 1 at ratio 1: the plain policy gradient, as ppo",
    "kl_cov": "its |log r| penalty is 0 (and has no gradient) at ratio 1 and its surrogate -A r is ppo's there",
    "cispo": "its clipped, detached weight is 1 at ratio 1: the gradient of ppo",
    "gspo": "its sequence ratio is 1 and nothing clips: the gradient of ppo with the same loss_agg_mode",
}
"""The policy losses whose whole difference from ppo needs the ratio pi / pi_old away from 1
(clip_cov acts at ratio 1: it drops the selected tokens' gradient; vanilla_pg is ppo unclipped)."""


def written_keys(raw: dict[str, Any], model: type[BaseModel] = Config, prefix: str = "") -> set[str]:
    """The dotted keys a config mapping sets: a section's keys one by one (``algorithm.kl_coef``,
    ``rollout.correction.mode``), a list or a plain value as one key (``rewards``)."""
    out: set[str] = set()
    for key, value in raw.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            continue  # unknown keys are reported by the loader
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and isinstance(value, dict):
            out |= written_keys(value, sub, f"{prefix}{key}.")
        elif not (value is None and isinstance(sub, type) and issubclass(sub, BaseModel)):
            out.add(f"{prefix}{key}")
    return out


def marker_line(keys: Iterable[str]) -> str:
    """The comment line of a run's ``config.yaml`` naming the keys the user wrote."""
    return f"{WRITTEN_MARKER} {' '.join(sorted(keys))}\n"


def written_in_file(text: str, raw: dict[str, Any]) -> set[str]:
    """The keys the user wrote, for a config file's ``text`` (``raw``: its mapping).

    A run's ``config.yaml`` names them on its :data:`WRITTEN_MARKER` line, trusted while the file's
    hash line still matches (an old name on it counts under its new one). A run's file written before
    that line existed, or one edited since (a copy used as a new config: it holds every key resolved), counts the keys whose value differs
    from the defaults of its preset (the preset itself counts when it is not the default one), and so
    does any other dump of a whole config (:func:`_is_dump`: ``steadyrl config show``'s output). Any
    other file: every key in it."""
    at = text.rfind("\n" + _HASH_MARKER)
    if at < 0:
        keys = written_keys(raw)
        return _differs_from_defaults(raw) if _is_dump(keys) else keys
    recorded = text[at + 1 + len(_HASH_MARKER):].split(maxsplit=1)[:1]
    intact = recorded == [hashlib.sha256(text[:at + 1].encode("utf-8")).hexdigest()]
    first = text[:text.find("\n") + 1 or len(text)]
    if intact and first.startswith(WRITTEN_MARKER):  # a foreign run dir's line: only names of keys are kept
        named = (RENAMED_KEYS.get(k, k) for k in first[len(WRITTEN_MARKER):].split())  # a run before a rename
        return {k for k in named if _KEY.match(k) and _names_a_key(k)}
    return _differs_from_defaults(raw)


def _is_dump(keys: set[str]) -> bool:
    """``keys`` (a file's) are a whole config's (``steadyrl config show``'s output, a run's config.yaml
    without its hash line): at least half of the algorithm section's keys, which no hand-written file sets."""
    algorithm = Config.model_fields["algorithm"].annotation.model_fields
    return 2 * sum(key.startswith("algorithm.") for key in keys) >= len(algorithm)


def _names_a_key(key: str) -> bool:
    """``key`` is a dotted key :func:`written_keys` can return (a field that is not a section)."""
    model: Any = Config
    for part in key.split("."):
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return False
        sub = field.annotation
        model = sub if isinstance(sub, type) and issubclass(sub, BaseModel) else None
    return model is None


def _at(data: Any, key: str) -> Any:
    for part in key.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _differs_from_defaults(raw: dict[str, Any]) -> set[str]:
    algorithm = raw.get("algorithm") if isinstance(raw.get("algorithm"), dict) else {}
    preset = algorithm.get("preset", "grpo")
    base = dict(ALGORITHM_PRESETS.get(preset, {})) if isinstance(preset, str) else {}
    defaults = Config.model_validate({"algorithm": {"preset": preset, **base}} if base else {})
    plain = defaults.model_dump(mode="json")
    plain["algorithm"]["preset"] = DEFAULT_PRESET  # a preset other than the default was written (a switched copy)
    return {key for key in written_keys(raw) if _at(raw, key) != _at(plain, key)}


def _get(config: Config, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = getattr(node, part)
    return node


def ratio_is_one(config: Config) -> bool:
    """The update's ratio pi / pi_old is exactly 1: one epoch, one optimizer step over the whole
    batch, old log-probs recomputed by the trainer (not the engine's: ``rollout.correction.bypass``)."""
    t, r = config.trainer, config.rollout
    one_batch = t.mini_batch_size is None or (not r.multi_turn.enabled and  # a step may hold more than P * G
                                               t.mini_batch_size >= r.prompts_per_step * r.group_size)
    return t.ppo_epochs == 1 and one_batch and not r.correction.bypass


def _ratio_one_why(config: Config, what: str) -> str:
    r, mini = config.rollout, config.trainer.mini_batch_size
    return (f"trainer.ppo_epochs=1 with one mini-batch (trainer.mini_batch_size={mini or 'null'}) "
            f"makes the ratio pi / pi_old exactly 1, so {what}; it acts with trainer.ppo_epochs > 1 or "
            f"trainer.mini_batch_size below the step's {r.prompts_per_step * r.group_size} samples")


@dataclass(frozen=True)
class Rule:
    """Keys that cannot act when ``why(config)`` returns a reason (with what makes them act)."""

    keys: tuple[str, ...]
    why: Callable[[Config], str | None]


def _kl_off(c: Config) -> str | None:
    return None if c.algorithm.kl_mode != "none" else (
        "algorithm.kl_mode is none: no KL term; set algorithm.kl_mode=loss (TRL's beta: a k3 loss term) or reward")


def _estimator_ignores(key: str) -> Callable[[Config], str | None]:
    def why(c: Config) -> str | None:
        name = c.algorithm.advantage_estimator
        if key in ESTIMATOR_OPTIONS.get(name, ()):
            return None
        users = sorted(n for n, opts in ESTIMATOR_OPTIONS.items() if key in opts)
        return f"algorithm.advantage_estimator={name} does not take it (only {', '.join(users)})"
    return why


def _loss_ignores(loss: str) -> Callable[[Config], str | None]:
    return lambda c: None if c.algorithm.policy_loss == loss else (
        f"algorithm.policy_loss={c.algorithm.policy_loss}: only policy_loss {loss} reads it")


def _when(test: Callable[[Config], bool], why: str | Callable[[Config], str]) -> Callable[[Config], str | None]:
    return lambda c: (why(c) if callable(why) else why) if test(c) else None


def _ratio_one_keys(c: Config) -> str | None:
    if not ratio_is_one(c):
        return None
    return _ratio_one_why(c, "no token's ratio leaves the clip range (nothing clips)")


def _ratio_one_loss(c: Config) -> str | None:
    loss = c.algorithm.policy_loss
    if loss not in RATIO_ONE_LOSSES or not ratio_is_one(c):
        return None
    return _ratio_one_why(c, f"policy_loss {loss} trains exactly as ppo ({RATIO_ONE_LOSSES[loss]})")


_PG_CLIPS = ("algorithm.pg_clip", "algorithm.pg_clip_low", "algorithm.pg_clip_high")

_GDPO_REPLACES = ("algorithm.reward_clip", "algorithm.reward_norm_mean", "algorithm.reward_norm_std",
                  "algorithm.reward_norm_by_domain", "algorithm.norm_by_std")
"""What GDPO's advantage is made without (trainer/processing.py's ``_gdpo`` reads the reward
functions' raw scores): the score's clip and normalisation, and GRPO's std division."""


def _gdpo_replaces(c: Config) -> str | None:
    if c.algorithm.reward_aggregation != "normalize_then_sum" or len(c.rewards) < 2:
        return None  # with one reward function there is nothing to aggregate: GRPO's path, where they act
    if c.teacher.name_or_path is not None and not c.teacher.task_rewards:
        return None  # pure distillation: no reward function enters, GRPO's path on the teacher's signal
    return ("algorithm.reward_aggregation=normalize_then_sum (GDPO) builds the advantage from each reward "
            "function's raw scores, normalised in its group and then over the batch; set "
            "algorithm.reward_aggregation=sum for the score's clip and normalisation to act")

RULES: tuple[Rule, ...] = (
    Rule(("algorithm.kl_coef", "algorithm.kl_estimator", "algorithm.kl_target", "algorithm.kl_horizon"), _kl_off),
    Rule(("algorithm.kl_horizon",), _when(lambda c: c.algorithm.kl_target is None,
                                          "algorithm.kl_target is null (a fixed kl_coef, no adaptive controller)")),
    *(Rule((f"algorithm.{k}",), _estimator_ignores(k)) for k in ("gamma", "lam", "norm_by_std", "group_stats")),
    Rule(_GDPO_REPLACES, _gdpo_replaces),
    Rule(("algorithm.value_clip",), _when(
        lambda c: c.algorithm.advantage_estimator not in CRITIC_ESTIMATORS,
        lambda c: f"algorithm.advantage_estimator={c.algorithm.advantage_estimator} trains no value model "
                  "(only gae does)")),
    Rule(_PG_CLIPS, _when(lambda c: c.algorithm.policy_loss not in CLIPPED_LOSSES,
                          lambda c: f"algorithm.policy_loss={c.algorithm.policy_loss} clips nothing "
                                    f"(only {', '.join(CLIPPED_LOSSES)} read the clip ranges)")),
    Rule(("algorithm.pg_clip",), _when(
        lambda c: c.algorithm.pg_clip_low is not None and c.algorithm.pg_clip_high is not None
        and not (c.algorithm.dual_clip and c.algorithm.dual_clip_c is None),
        "algorithm.pg_clip_low and pg_clip_high are both set and replace it")),
    Rule(("algorithm.dual_clip_c",), _when(lambda c: not c.algorithm.dual_clip, "algorithm.dual_clip is false")),
    Rule(("algorithm.dual_clip", "algorithm.dual_clip_c"), _when(
        lambda c: c.algorithm.policy_loss not in DUAL_CLIP_LOSSES,
        lambda c: f"algorithm.policy_loss={c.algorithm.policy_loss} has no dual clip "
                  f"(only {', '.join(DUAL_CLIP_LOSSES)})")),
    *(Rule(tuple(f"algorithm.{k}" for k in opts), _loss_ignores(loss)) for loss, opts in LOSS_OPTIONS.items()),
    Rule(("algorithm.dynamic_sampling_filter", "algorithm.dynamic_sampling_max_draws"),
         _when(lambda c: not c.algorithm.dynamic_sampling, "algorithm.dynamic_sampling is false")),
    Rule(("algorithm.difficulty_low", "algorithm.difficulty_high"), _when(
        lambda c: not c.algorithm.difficulty_mask and not (
            c.algorithm.dynamic_sampling and c.algorithm.dynamic_sampling_filter == "difficulty"),
        "algorithm.difficulty_mask is false and dynamic sampling does not filter by difficulty")),
    Rule(("algorithm.norm_length",), _when(
        lambda c: c.algorithm.loss_agg_mode != "seq-mean-token-sum-norm",
        lambda c: f"algorithm.loss_agg_mode={c.algorithm.loss_agg_mode} (only seq-mean-token-sum-norm "
                  "divides by a constant length)")),
    Rule(("algorithm.overlong_penalty_factor", "algorithm.overlong_scope"), _when(
        lambda c: c.algorithm.overlong_buffer is None,
        "algorithm.overlong_buffer is null (no overlong punishment); set it to a number of tokens")),
    Rule(("model.bf16_update",), _when(
        lambda c: c.model.dtype not in ("bfloat16", "float16"),
        lambda c: f"model.dtype={c.model.dtype} keeps float32 weights (it applies to model.dtype bfloat16 "
                  "or float16)")),
    # the update's ratio is exactly 1: these act from the second optimizer step of a batch on
    Rule((*_PG_CLIPS, "algorithm.dual_clip", "algorithm.dual_clip_c"), _ratio_one_keys),
    Rule(("algorithm.policy_loss",), _ratio_one_loss),
    Rule(("algorithm.sapo_tau_pos", "algorithm.sapo_tau_neg"),
         lambda c: _ratio_one_why(c, "the SAPO gate is 1 whatever its temperature") if ratio_is_one(c) else None),
    Rule(("algorithm.kl_cov_coef", "algorithm.kl_cov_ratio"),
         lambda c: _ratio_one_why(c, "the |log r| penalty is 0") if ratio_is_one(c) else None),
    Rule(tuple(f"teacher.{k}" for k in ("revision", "dtype", "device", "trust_remote_code", "distill_coef",
                                        "task_rewards")),
         _when(lambda c: c.teacher.name_or_path is None,
               "teacher.name_or_path is null (no distillation); set it to the teacher model")),
)


def _whose(config: Config, key: str, written: set[str]) -> str:
    """`` (the dr_grpo preset's)`` when the value a reason names was not written by the user."""
    algo = config.algorithm
    leaf = key.rsplit(".", 1)[-1]
    preset = ALGORITHM_PRESETS.get(algo.preset, {})
    if key in written or not key.startswith("algorithm.") or leaf not in preset:
        return ""
    return f" (the {algo.preset} preset's)" if preset[leaf] == getattr(algo, leaf) else ""


def inert_notes(config: Config, written: set[str]) -> list[str]:
    """``"<key>=<value> has no effect: <why>"`` for each written key that cannot act, in table order."""
    seen, notes = set(), []
    for rule in RULES:
        keys = [k for k in rule.keys if k in written and k not in seen]
        if not keys:
            continue
        why = rule.why(config)
        if why is None:
            continue
        if why.startswith("algorithm.kl_mode is none"):
            why = why.replace("is none", "is none" + _whose(config, "algorithm.kl_mode", written), 1)
        for key in keys:
            seen.add(key)
            value = _get(config, key)
            notes.append(f"{key}={'null' if value is None else value} has no effect: {why}")
    preset_loss = _preset_policy_loss_note(config, written)
    return notes + ([preset_loss] if preset_loss else [])


def _preset_policy_loss_note(config: Config, written: set[str]) -> str | None:
    """``algorithm.preset=cispo`` chose a policy loss that cannot act (the key the user wrote is the preset)."""
    algo = config.algorithm
    if "algorithm.preset" not in written or "algorithm.policy_loss" in written:
        return None
    if ALGORITHM_PRESETS.get(algo.preset, {}).get("policy_loss") != algo.policy_loss:
        return None
    why = _ratio_one_loss(config)
    return None if why is None else f"algorithm.preset={algo.preset} (its policy_loss={algo.policy_loss}): {why}"
