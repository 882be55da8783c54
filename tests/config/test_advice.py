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
    notes = config_notes(load_config(None, overrides))
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
