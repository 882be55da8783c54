"""Every default the seed notes fix (``shared/seeds/``), asserted against the named constants of
``steadyrl.functional.constants`` and the schema; and the schema's choices are exactly the names
the functional registries hold."""

from __future__ import annotations

import typing

import pytest
import torch

from steadyrl.config import Config, load_config
from steadyrl.config import schema
from steadyrl.functional import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGG_MODES,
    NORM_TYPES,
    POLICY_LOSSES,
    constants,
    kl_penalty,
)

SEED_VALUES = [
    # constant, value from the seed note, note
    ("PG_CLIP", 0.2, "003"),
    ("GAE_LAMBDA", 0.95, "003"),
    ("GAMMA", 1.0, "003"),
    ("MAX_GRAD_NORM", 1.0, "003"),
    ("DIFFICULTY_LOW", 0.1, "001"),
    ("DIFFICULTY_HIGH", 0.95, "001"),
    ("DIFFICULTY_WEIGHT_MIN", 0.5, "001"),
    ("DIFFICULTY_WEIGHT_MAX", 2.0, "001"),
    ("MASK_EPS", 1e-8, "000"),
    ("NORM_EPS", 1e-6, "000"),
    ("RUNNING_COUNT_INIT", 1e-24, "000"),
    ("K3_VALUE_CLAMP", 10.0, "000"),
    ("LOGPROB_DIFF_CLAMP", 40.0, "002"),
]


@pytest.mark.parametrize(("name", "value", "note"), SEED_VALUES, ids=[s[0] for s in SEED_VALUES])
def test_the_constants_hold_the_seed_values(name, value, note):
    assert getattr(constants, name) == value


def test_the_config_defaults_are_the_seed_constants():
    config = Config()
    algo, optim, trainer = config.algorithm, config.optim, config.trainer
    assert algo.pg_clip == constants.PG_CLIP == 0.2
    assert algo.clip_low == algo.clip_high == 0.2  # asymmetric bounds default to pg_clip
    assert algo.lam == constants.GAE_LAMBDA == 0.95
    assert algo.gamma == constants.GAMMA == 1.0
    assert optim.max_grad_norm == constants.MAX_GRAD_NORM == 1.0
    assert trainer.ppo_epochs == 1
    assert (algo.difficulty_low, algo.difficulty_high) == (constants.DIFFICULTY_LOW, constants.DIFFICULTY_HIGH)
    assert (algo.difficulty_low, algo.difficulty_high) == (0.1, 0.95)
    assert algo.difficulty_mask is False and algo.dual_clip is False  # opt-in, as in the seeds


def test_the_demo_config_keeps_the_seed_defaults():
    algo = load_config().algorithm
    assert (algo.pg_clip, algo.lam, algo.gamma) == (0.2, 0.95, 1.0)
    assert load_config().optim.max_grad_norm == 1.0 and load_config().trainer.ppo_epochs == 1


@pytest.mark.parametrize("clip", [0.2, 0.1, 0.3])
def test_dual_clip_defaults_to_one_plus_twice_the_clip_when_enabled(clip):
    off = load_config(None, [f"algorithm.pg_clip={clip}"]).algorithm
    assert off.dual_clip_value is None
    on = load_config(None, [f"algorithm.pg_clip={clip}", "algorithm.dual_clip=true"]).algorithm
    assert on.dual_clip_value == pytest.approx(1 + 2 * clip) == constants.dual_clip_default(clip)
    assert constants.dual_clip_default() == pytest.approx(1.4)


def test_an_explicit_dual_clip_constant_wins():
    algo = load_config(None, ["algorithm.dual_clip=true", "algorithm.dual_clip_c=3"]).algorithm
    assert algo.dual_clip_value == 3.0


def test_asymmetric_clip_bounds_fall_back_to_pg_clip_one_at_a_time():
    algo = load_config(None, ["algorithm.pg_clip_high=0.28"]).algorithm
    assert (algo.clip_low, algo.clip_high) == (0.2, 0.28)


def test_the_kl_difference_clamp_lives_in_functional_not_in_the_config():
    """Seed 002: ``logprobs - ref_logprobs`` is clamped to [-40, 40] before any estimator; it is a
    constant of the functional core, not a knob."""
    knobs = [name for name in schema.AlgorithmConfig.model_fields if "clamp" in name or "logprob" in name]
    assert knobs == []
    big = torch.tensor([[100.0, -100.0]])
    zero = torch.zeros_like(big)
    assert kl_penalty(big, zero, "k1").tolist() == [[40.0, -40.0]]
    k3 = kl_penalty(big, zero, "k3")
    assert torch.isfinite(k3).all() and k3.abs().max() <= constants.K3_VALUE_CLAMP


def _choices(alias) -> set[str]:
    return set(typing.get_args(alias))


def test_the_schemas_choices_are_the_registered_names():
    assert _choices(schema.AdvantageName) == set(ADVANTAGE_ESTIMATORS)
    assert _choices(schema.PolicyLossName) == set(POLICY_LOSSES)
    assert _choices(schema.LossAggMode) == set(LOSS_AGG_MODES)
    assert _choices(schema.NormType) == set(NORM_TYPES)
    assert _choices(schema.KLEstimator) <= set(KL_ESTIMATORS)  # the registry adds aliases (kl, mse, low_var_kl)


def test_the_configs_view_of_the_estimators_is_the_registrys():
    assert schema.GROUPED_BY_ESTIMATOR == {name: est.grouped for name, est in ADVANTAGE_ESTIMATORS.items()}


def test_the_options_an_estimator_declares_are_algorithm_settings():
    fields = set(schema.AlgorithmConfig.model_fields)
    for name, est in ADVANTAGE_ESTIMATORS.items():
        assert set(est.options) <= fields, (name, est.options)
