"""What is not supported together lives in one table (steadyrl/config/compat.py): a rule added
there is enforced at its stage, at config load or before any model load, with its own words."""

from __future__ import annotations

import pytest
import torch

from steadyrl.config import compat, load_config
from steadyrl.errors import ConfigError

CPU = torch.device("cpu")


def test_every_rule_has_a_stage_the_checks_know():
    assert compat.RULES, "the table is empty"
    assert {stage for stage, _ in compat.RULES} == {"load", "placement"}


def test_a_load_rule_added_to_the_table_refuses_the_config_when_it_loads(monkeypatch):
    def no_tiny_groups(config):
        return "rollout.group_size = 3 is refused by a test rule" if config.rollout.group_size == 3 else None

    monkeypatch.setattr(compat, "RULES", [*compat.RULES, ("load", no_tiny_groups)])
    load_config(None, ["rollout.group_size=4"])
    with pytest.raises(ConfigError, match="refused by a test rule"):
        load_config(None, ["rollout.group_size=3"])


def test_a_placement_rule_sees_the_device_and_the_world_size(monkeypatch):
    seen = []

    def record(config, device, world):
        seen.append((device, world))
        return "two ranks refused by a test rule" if world == 2 else None

    monkeypatch.setattr(compat, "RULES", [*compat.RULES, ("placement", record)])
    config = load_config(None, ["trainer.device=cpu", "rollout.prompts_per_step=4"])
    compat.check_parallel(config, CPU, 1)
    with pytest.raises(ConfigError, match="two ranks refused by a test rule"):
        compat.check_parallel(config, CPU, 2)
    assert seen == [("cpu", 1), ("cpu", 2)]


def test_a_placement_rule_does_not_run_at_load(monkeypatch):
    def always(config, device, world):
        return "refused"

    monkeypatch.setattr(compat, "RULES", [*compat.RULES, ("placement", always)])
    assert load_config(None, []).rollout.group_size >= 2  # loads: the rule needs a device
