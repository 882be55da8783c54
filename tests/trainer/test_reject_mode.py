"""``rollout.correction.mode: reject`` (verl's ``rollout_rs``, issue 30 item 20): tokens or sequences
whose ratio leaves ``[low, high]`` are dropped, the kept ones train at weight 1 (``mask`` weights them
by their ratio). A float64 oracle token by token, the config's mapping, and a step's advantages."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from steadyrl.config import load_config
from steadyrl.functional import correct_mismatch
from steadyrl.trainer.mismatch import importance_correction

torch.set_num_threads(1)

OLD = torch.zeros(2, 3, dtype=torch.float64)
ROLLOUT = torch.tensor([[0.0, -1.0, 1.0], [-0.3, 0.2, -2.0]], dtype=torch.float64)  # w = exp(-rollout)
MASK = torch.ones(2, 3, dtype=torch.bool)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_reject_keeps_the_ratios_inside_the_bounds_at_weight_one(level):
    got = correct_mismatch(OLD, ROLLOUT, MASK, level=level, modes={"reject": {"low": 0.5, "high": 2.0}})
    for i in range(2):
        seq = math.exp(-sum(float(x) for x in ROLLOUT[i]))
        for j in range(3):
            w = math.exp(-float(ROLLOUT[i, j])) if level == "token" else seq
            inside = 0.5 <= w <= 2.0
            assert bool(got.keep[i, j]) == inside and float(got.weights[i, j]) == (1.0 if inside else 0.0)
    masked = correct_mismatch(OLD, ROLLOUT, MASK, level=level, modes={"mask": {"low": 0.5, "high": 2.0}})
    assert torch.equal(masked.keep, got.keep)  # the same drops as mask, only the weights differ


def test_the_config_maps_reject_to_the_library_mode_with_the_mask_bounds():
    c = load_config(None, ["rollout.dtype=float32", "rollout.correction.mode=reject"]).rollout.correction
    assert (c.low, c.high) == (0.5, 5.0)
    assert c.modes(None) == ("token", {"reject": {"low": 0.5, "high": 5.0}})


def test_a_step_under_reject_keeps_the_advantages_of_the_kept_tokens_unweighted():
    run = SimpleNamespace(config=load_config(None, ["rollout.dtype=float32", "rollout.correction.mode=reject",
                                                   "rollout.correction.high=2"]))
    whole = SimpleNamespace(old_logprobs=OLD.float(), rollout_logprobs=ROLLOUT.float(), policy_mask=MASK.long(),
                            result=SimpleNamespace(domains=None))
    adv, mask, metrics = importance_correction(run.config.rollout, whole, torch.ones(2, 3), MASK.float())
    assert mask.tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]  # e^1, e^2 > 2 and e^-1 < 0.5: dropped
    assert torch.equal(adv * mask, mask)
    assert metrics["mismatch/masked_token_frac"] == pytest.approx(3 / 6)
