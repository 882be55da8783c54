"""The ``mismatch/`` fractions say what the step did to the loss (issue 30, B5): with no correction
nothing is dropped, whatever the engine's log-probs; with ``rollout.tis_cap`` a ``-inf`` engine
log-prob trains at the cap (truncated, not dropped) and a NaN one is dropped; with
``rollout.correction`` the dropped fraction is the fraction of policy tokens that left the loss."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from steadyrl.config import load_config
from steadyrl.trainer.mismatch import importance_correction

torch.set_num_threads(1)


def _whole(old, rollout, policy):
    return SimpleNamespace(old_logprobs=old, rollout_logprobs=rollout, policy_mask=policy,
                           result=SimpleNamespace(domains=None))


def _run(*overrides):
    return load_config(None, ["rollout.dtype=float32", *overrides]).rollout


OLD = torch.zeros(2, 4)
ROLLOUT = torch.tensor([[0.0, float("-inf"), float("nan"), -3.0], [0.0, float("inf"), -0.1, 0.0]])
POLICY = torch.ones(2, 4)


def _step(*overrides):
    adv, mask, metrics = importance_correction(_run(*overrides), _whole(OLD, ROLLOUT, POLICY), torch.ones(2, 4),
                                               POLICY.clone())
    return adv, mask, metrics


def test_with_no_correction_no_token_is_reported_dropped_since_none_is():
    adv, mask, metrics = _step()
    assert torch.equal(mask, POLICY) and torch.equal(adv, torch.ones(2, 4))  # every token trains, weight 1
    assert metrics["mismatch/masked_token_frac"] == 0 and metrics["mismatch/masked_seq_frac"] == 0
    assert metrics["mismatch/truncated_frac"] == 0
    assert metrics["mismatch/nonfinite_tokens"] == 3  # measured, still


def test_with_tis_cap_a_minus_inf_token_is_reported_truncated_and_a_nan_one_dropped():
    adv, mask, metrics = _step("rollout.tis_cap=2")
    assert mask[0].tolist() == [1.0, 1.0, 0.0, 1.0]  # only the NaN token left the loss
    assert adv[0, 1] == pytest.approx(2.0) and adv[0, 3] == pytest.approx(2.0)  # -inf and e^3: at the cap
    dropped = float(((POLICY != 0) & (mask == 0)).sum()) / 8
    assert metrics["mismatch/masked_token_frac"] == pytest.approx(dropped) == pytest.approx(1 / 8)
    assert metrics["mismatch/truncated_frac"] == pytest.approx(2 / 8)


@pytest.mark.parametrize("overrides", [
    (), ("rollout.tis_cap=2",), ("rollout.correction.mode=truncate",), ("rollout.correction.mode=mask",),
    ("rollout.correction.mode=truncate+mask", "rollout.correction.level=sequence"),
    ("rollout.correction.mode=geometric+truncate",),
])
def test_the_dropped_fraction_is_the_fraction_of_policy_tokens_that_left_the_loss(overrides):
    _, mask, metrics = _step(*overrides)
    left = float(((POLICY != 0) & (mask == 0)).sum()) / float(POLICY.sum())
    assert metrics["mismatch/masked_token_frac"] == pytest.approx(left)
    lost_rows = float(((POLICY != 0).any(-1) & ~(mask != 0).any(-1)).sum()) / 2
    assert metrics["mismatch/masked_seq_frac"] == pytest.approx(lost_rows)
