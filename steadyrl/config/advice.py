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
    notes += _rubric_template_notes(config)
    if algo.advantage_estimator == "token_reward" and "algorithm.advantage_estimator" in user_written(config):
        if config.teacher.name_or_path is None:
            notes.append(
                "algorithm.advantage_estimator=token_reward without a teacher (teacher.name_or_path is null): a "
                "token's advantage is its own reward, and only each row's last token holds one (the score), so "
                "every other token trains on nothing. It is for on-policy distillation (docs/distillation.md): "
                "set teacher.name_or_path, or use reinforce_plus_plus or grpo")
        elif config.teacher.task_rewards:
            notes.append(
                "algorithm.advantage_estimator=token_reward with teacher.task_rewards=true: the task score sits "
                "on each row's last token only, so it trains that last token alone (the teacher's rewards train "
                "every token); set teacher.task_rewards=false for pure distillation (Thinking Machines' "
                "setting), or use reinforce_plus_plus to carry the score back to every token")
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


def _rubric_template_notes(config: Config) -> list[str]:
    """An ``llm_judge`` rubric template of the user's own that does not ask for the ``VERDICT:`` line
    (one from before that line was the only place read: its judge's replies may now score 0)."""
    notes = []
    for i, reward in enumerate(config.rewards):
        options = reward.options
        template = options.get("rubric_template")
        if reward.name != "llm_judge" or options.get("mode") != "rubric" or not isinstance(template, str):
            continue
        if "verdict" not in template.lower():
            notes.append(
                f"rewards[{i}].options.rubric_template does not ask for the judge's last line VERDICT: PASS or "
                "VERDICT: FAIL, and only that line is read (or a reply that is one bare word PASS, FAIL, YES or "
                "NO): a reply such as 'PASS. The response is polite.' scores 0 (counted in "
                f"reward/{reward.label or reward.name}/criterion/not_a_verdict_frac); end the template with "
                "'Reason briefly if you need to, then end your reply with one last line that is exactly "
                "VERDICT: PASS or VERDICT: FAIL.'")
    return notes
