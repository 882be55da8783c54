"""The doctor's thresholds: every number a detector compares against, with its default and what it
means. Changed on the command line with ``--set name=value`` (``steadyrl doctor RUN_DIR --set
entropy_collapse_ratio=0.2``); docs/stability.md lists them."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from ..errors import ConfigError


def _t(default: float, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Thresholds:
    min_steps: float = _t(6, "Trend detectors need at least this many training steps with the metric.")
    window_frac: float = _t(0.25, "The early and late windows are the first and last this fraction of "
                            "the steps (at least 2 steps each); at most 0.5.")
    entropy_collapse_ratio: float = _t(0.3, "Entropy collapse: late mean actor/entropy below this "
                                       "fraction of the early mean.")
    entropy_explosion_ratio: float = _t(2.0, "Entropy explosion: late mean actor/entropy above this "
                                        "multiple of the early mean.")
    clip_frac_max: float = _t(0.2, "Clip drift: late mean actor/pg_clipfrac above this ...")
    clip_frac_rise: float = _t(0.1, "... or risen by more than this since the early window.")
    solved_frac: float = _t(0.9, "Solved: a run whose late reward/mean sits this far up [reward/min, reward/max] "
                            "(late means) has learned its prompts; its entropy falling and its groups all "
                            "solved are then convergence, so entropy_collapse and zero_variance stay quiet. "
                            "Above 1: never.")
    zero_var_max: float = _t(0.6, "No signal: late mean batch/zero_std_group_frac (groups whose "
                             "rewards are all equal) above this.")
    truncation_max: float = _t(0.1, "Truncation: late mean response/truncated_frac above this ...")
    truncation_rise: float = _t(0.05, "... or risen by more than this since the early window.")
    length_growth: float = _t(1.5, "Length hacking: late mean response/length_mean above this multiple "
                              "of the early mean ...")
    length_reward_corr: float = _t(0.7, "... while its correlation with reward/mean over steps is above this.")
    reward_rise: float = _t(0.05, "Reward vs held-out: reward/mean rose by more than this (late - early) ...")
    heldout_drop: float = _t(0.03, "... while the last eval/accuracy is this far below the best earlier one (with "
                             "many evaluations: the mean of the last window_frac of them below the best as many "
                             "in a row).")
    mismatch_max: float = _t(0.05, "Mismatch: late mean of the absolute rollout/logprob_diff_mean above this ...")
    mismatch_growth: float = _t(3.0, "... or grown to this multiple of the early mean ...")
    mismatch_floor: float = _t(0.01, "... and above this (below it, growth is noise).")
    grad_spike_factor: float = _t(5.0, "Grad spike: actor/grad_norm above this multiple of the median of "
                                  "the preceding steps' ...")
    grad_spike_window: float = _t(10, "... this many steps (at least 3 needed) ...")
    grad_spike_min: float = _t(1.0, "... and above this norm (optim.max_grad_norm's default: a jump between "
                               "small norms, late in a converged run, is noise).")
    skipped_steps_max: float = _t(0, "Skipped steps: more than this many optimizer steps skipped for a "
                                  "non-finite loss or gradient (health/skipped_steps).")
    dominance_share: float = _t(0.9, "Dominance: one reward component carries more than this share of "
                                "the reward's spread over samples, or one domain more than this share "
                                "of the samples.")
    staleness_max: float = _t(2.0, "Staleness: mean rollout/staleness_mean above this many policy versions ...")
    tis_clip_max: float = _t(0.2, "... or, with stale batches, late mean rollout/tis_clip_frac above this.")
    params_changed_min: float = _t(0.5, "Lost updates: median actor/params_changed_frac (the share of sampled "
                                   "weights a step changed; float32 training: 0.9 or more) below this.")
    update_rms_min: float = _t(0.05, "Lost updates under model.bf16_update=stochastic_rounding (which changes few "
                               "weights per step by design): median actor/update_rms (motion per weight) below "
                               "this multiple of the step's learning rate (actor/lr; optim.lr where not logged).")
    no_verdict_max: float = _t(0.5, "Silent judge: mean reward/<name>/criterion/not_a_verdict_frac (rubric "
                               "judge replies without a verdict, each scored 0) above this.")
    failed_episodes_max: float = _t(0.05, "Failed episodes: mean rollout/failed_episode_frac over the run (episodes "
                                    "whose agent or environment raised, timed out or returned no number) above this.")

    @classmethod
    def help(cls) -> dict[str, tuple[float, str]]:
        """``name -> (default, help)``."""
        return {f.name: (f.default, f.metadata["help"]) for f in fields(cls)}

    def with_overrides(self, items: list[str], key: str = "--set") -> Thresholds:
        """These thresholds with ``name=value`` items applied; a :class:`ConfigError` naming ``key``
        (where the items came from) and an unknown name or a value that is not a number >= 0."""
        known = self.help()
        changes = {}
        for item in items:
            name, sep, text = item.partition("=")
            name = name.strip()
            if not sep or name not in known:
                raise ConfigError(f"{key} {item!r}: give name=value with name one of {', '.join(known)}")
            try:
                value = float(text)
            except ValueError:
                value = float("nan")
            if not value >= 0 or value == float("inf"):
                raise ConfigError(f"{key} {name}={text!r}: the value must be a finite number >= 0")
            if name == "window_frac" and not 0 < value <= 0.5:
                raise ConfigError(f"{key} window_frac={text!r}: the value must be in (0, 0.5]")
            changes[name] = value
        return replace(self, **changes)
