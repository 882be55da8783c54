"""Notes on valid but probably unintended settings: printed, never applied."""

import pytest
import yaml

from steadyrl import cli
from steadyrl.config import config_notes, load_config


@pytest.mark.parametrize("overrides,expected", [
    (["algorithm.policy_loss=gspo"], ["clip ranges 0.2 / 0.2", "loss_agg_mode=token-mean"]),
    (["algorithm.policy_loss=gspo", "algorithm.loss_agg_mode=seq-mean-token-mean"], ["clip ranges 0.2 / 0.2"]),
    (["algorithm.preset=gspo"], []),
    (["algorithm.preset=gspo", "algorithm.pg_clip_high=0.05"], ["clip ranges 0.0003 / 0.05"]),
    (["algorithm.policy_loss=cispo"], ["lower clip range of 0.2"]),
    (["algorithm.preset=cispo"], []),
    (["algorithm.preset=ppo"], []),
    (["algorithm.preset=ppo", "algorithm.advantage_estimator=grpo"], ["the preset's is gae"]),
    ([], []),
])
def test_notes_name_the_keys_and_values_that_look_unintended(overrides, expected):
    # two epochs: the ratio leaves 1, so these losses can act (tests/config/test_inert.py: when they cannot)
    notes = config_notes(load_config(None, [*overrides, "trainer.ppo_epochs=2"]))
    assert len(notes) == len(expected), notes
    for note, text in zip(notes, expected):
        assert text in note and ("algorithm.policy_loss" in note or "algorithm.preset" in note)


def test_a_note_changes_nothing():
    config = load_config(None, ["algorithm.policy_loss=gspo"])
    assert config_notes(config)
    assert (config.algorithm.clip_low, config.algorithm.clip_high) == (0.2, 0.2)
    assert config.algorithm.loss_agg_mode == "token-mean"


def test_config_show_prints_the_notes_as_yaml_comments(capsys):
    assert cli.main(["config", "show", "algorithm.policy_loss=gspo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# note: algorithm.policy_loss=gspo")
    assert yaml.safe_load(out)["algorithm"]["policy_loss"] == "gspo"  # still loadable YAML


@pytest.mark.parametrize("overrides,expected", [
    # issue 33: TRL's beta on dr_grpo, whose kl_mode is none, was dropped without a word
    (["algorithm.preset=dr_grpo", "algorithm.kl_coef=0.04"],
     ["algorithm.kl_coef=0.04 has no effect: algorithm.kl_mode is none (the dr_grpo preset's)"]),
    (["algorithm.preset=dr_grpo", "algorithm.kl_coef=0.04", "algorithm.kl_mode=loss"], []),
    (["algorithm.lam=0.9", "algorithm.value_clip=0.2"],
     ["algorithm.lam=0.9 has no effect: algorithm.advantage_estimator=grpo does not take it (only gae)",
      "algorithm.value_clip=0.2 has no effect: algorithm.advantage_estimator=grpo trains no value model"]),
    (["algorithm.preset=ppo", "algorithm.lam=0.9", "algorithm.value_clip=0.2"], []),
    (["algorithm.dual_clip_c=4", "algorithm.kl_mode=loss", "algorithm.kl_horizon=500",
      "algorithm.dynamic_sampling_max_draws=5"],
     ["algorithm.kl_horizon=500 has no effect: algorithm.kl_target is null",
      "algorithm.dual_clip_c=4.0 has no effect: algorithm.dual_clip is false",
      "algorithm.dynamic_sampling_max_draws=5 has no effect: algorithm.dynamic_sampling is false"]),
    (["algorithm.kl_mode=loss", "algorithm.kl_coef=0.001"], []),  # the preset's own value, set again: it applies
    # the built-in demo's kl_mode is none: a kl_coef written, even the preset's value, cannot act
    (["algorithm.kl_coef=0.001"], ["algorithm.kl_coef=0.001 has no effect: algorithm.kl_mode is none"]),
])
def test_a_key_you_set_that_the_resolved_config_ignores_gets_a_note(overrides, expected):
    notes = config_notes(load_config(None, overrides))
    assert len(notes) == len(expected), notes
    for note, text in zip(notes, expected):
        assert note.startswith(text), note


def test_the_estimator_options_table_matches_the_registry():
    from steadyrl.config.advice import CRITIC_ESTIMATORS, ESTIMATOR_OPTIONS
    from steadyrl.functional.advantages import ADVANTAGE_ESTIMATORS

    assert ESTIMATOR_OPTIONS == {n: e.options for n, e in ADVANTAGE_ESTIMATORS.items() if e.options}
    assert CRITIC_ESTIMATORS == tuple(n for n, e in ADVANTAGE_ESTIMATORS.items() if e.needs_values)
