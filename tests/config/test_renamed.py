"""Keys steadyrl renamed keep working with their old meaning and a deprecation note
(steadyrl/config/renamed.py): the two old ``tis_cap`` keys and the one ``rollout.tis_cap``."""

from __future__ import annotations

import pytest
import yaml

from steadyrl.config import config_notes, load_config
from steadyrl.config.loading import dump_config
from steadyrl.errors import ConfigError

ASYNC = "rollout.asynchronous.max_staleness=1"


def test_tis_cap_defaults_to_off_without_asynchronous_rollouts_and_2_with_them():
    assert load_config(None, []).rollout.tis_cap is None
    assert load_config(None, [ASYNC]).rollout.tis_cap == 2.0
    assert load_config(None, [ASYNC, "rollout.tis_cap=null"]).rollout.tis_cap is None
    assert load_config(None, ["rollout.tis_cap=3.0"]).rollout.tis_cap == 3.0


@pytest.mark.parametrize(("overrides", "cap"), [
    (["rollout.vllm.tis_cap=2.5"], 2.5),
    ([ASYNC, "rollout.asynchronous.tis_cap=1.5"], 1.5),
    ([ASYNC, "rollout.asynchronous.tis_cap=null"], None),
    # an old key where it never applied is ignored, as before
    ([ASYNC, "rollout.vllm.tis_cap=3.0"], 2.0),
    (["rollout.asynchronous.tis_cap=3.0"], None),
])
def test_an_old_tis_cap_key_keeps_its_old_meaning_with_a_deprecation_note(overrides, cap):
    config = load_config(None, overrides)
    assert config.rollout.tis_cap == cap
    old = next(o.split("=")[0] for o in overrides if ".tis_cap" in o)
    notes = [n for n in config_notes(config) if "deprecated" in n]
    assert len(notes) == 1 and notes[0].startswith(f"{old} is deprecated, write rollout.tis_cap")


def test_a_new_config_has_no_deprecation_note():
    assert not [n for n in config_notes(load_config(None, [ASYNC, "rollout.tis_cap=2.0"])) if "deprecated" in n]


def test_an_old_saved_config_with_both_old_keys_resumes_with_the_cap_it_had(tmp_path):
    for staleness, cap in ((None, 0.5), (1, 4.0)):
        raw = yaml.safe_load(dump_config(load_config(None, [])))
        del raw["rollout"]["tis_cap"]
        raw["rollout"]["vllm"]["tis_cap"] = 0.5
        raw["rollout"]["asynchronous"].update(max_staleness=staleness, tis_cap=4.0)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(raw))
        config = load_config(str(path), [])
        assert config.rollout.tis_cap == cap
        assert len([n for n in config_notes(config) if "deprecated" in n]) == 2


def test_a_saved_config_keeps_the_cap_in_force(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(load_config(None, [ASYNC])))
    assert "tis_cap: 2.0" in path.read_text()
    assert load_config(str(path), []).rollout.tis_cap == 2.0


def test_an_old_tis_cap_key_next_to_the_new_one_is_an_error_naming_both():
    with pytest.raises(ConfigError, match=r"rollout.vllm.tis_cap and rollout.tis_cap are both set"):
        load_config(None, ["rollout.vllm.tis_cap=2.0", "rollout.tis_cap=3.0"])


def test_a_bad_value_under_an_old_key_is_reported_under_the_new_one():
    with pytest.raises(ConfigError, match=r"rollout.tis_cap = -1"):
        load_config(None, ["rollout.vllm.tis_cap=-1"])
