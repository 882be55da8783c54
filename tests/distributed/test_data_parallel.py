"""Data parallelism on the CPU (gloo, 2 processes): one update on each rank's half of a fixed
global batch gives the parameters of one process on the whole batch (max |diff| <= 1e-6 in
float32) for every loss aggregation mode, through the trainer's own code: the DDP-wrapped
log-prob module, no_sync micro-batch accumulation, global loss denominators and the
world-size gradient scale. The step's metrics and the batch-level reward statistics
(normalisation, running moments, whitening) are those of the whole batch too.

FSDP2 runs here on gloo too (torch >= 2.6 shards on the CPU): the same equivalence, generation
through FSDPGenerator with ranks decoding different lengths, and full (unsharded) weights and
optimizer state that load back into a freshly sharded model. What stays untested is CUDA-only:
NCCL, device placement, mixed precision (see docs/scaling.md)."""

from __future__ import annotations

import pytest
import torch
from dp_common import (FSDP_MODES, HERE, LOSS_MODES, critic_update, launch, score_result, step_config,
                       tiny_batch)

from steadyrl.functional import RunningMoments
from steadyrl.models import load_policy
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards
from steadyrl.trainer.update import ppo_update

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def two_process_result(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("dp_update")
    proc = launch([str(HERE / "worker_update.py"), str(tiny_model_dir), str(out)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out / "result.pt", weights_only=False)


def _single_process_update(tiny_model_dir, mode: str):
    policy = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    metrics, steps, skipped = ppo_update(policy, opt, tiny_batch(), step_config(mode), kl_coef=0.1, device=CPU)
    return policy.state_dict(), metrics, (steps, skipped)


@pytest.mark.slow
@pytest.mark.parametrize("mode", LOSS_MODES)
def test_two_ranks_update_the_parameters_like_one_process(mode, two_process_result, tiny_model_dir):
    params, metrics, steps = _single_process_update(tiny_model_dir, mode)
    got = two_process_result[mode]
    assert got["steps"] == steps == (1, 0)
    assert got["ranks_agree"]  # rank 1 holds exactly rank 0's parameters
    start = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU).state_dict()
    moved = max(float((params[k] - start[k]).abs().max()) for k in params)
    assert moved > 1e-3  # the update really moved the weights
    diff = max(float((got["params"][k] - params[k]).abs().max()) for k in params)
    assert diff <= 1e-6, f"{mode}: max |diff| {diff:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("mode", LOSS_MODES)
def test_update_metrics_are_reduced_over_ranks(mode, two_process_result, tiny_model_dir):
    _, metrics, _ = _single_process_update(tiny_model_dir, mode)
    got = two_process_result[mode]["metrics"]
    assert set(got) == set(metrics)
    for name in ("actor/pg_loss", "actor/kl_loss", "actor/loss", "actor/grad_norm", "kl/k3", "actor/entropy",
                 "actor/pg_clipfrac", "actor/ratio_mean", "actor/approx_kl"):
        assert got[name] == pytest.approx(metrics[name], rel=1e-5, abs=1e-7), name


@pytest.mark.slow
def test_batch_statistics_of_reward_processing_are_global(two_process_result):
    batch = tiny_batch()
    whole = score_result(slice(None))
    running = RunningMoments()
    processed = process_rewards(RewardInputs(whole.scores, whole.valid, batch.response_mask,
                                             torch.zeros(16, dtype=torch.bool), 4),
                                step_config("token-mean").algorithm, RewardSettings(running=running))
    got = two_process_result["processing"]
    assert got["rows"] == 16
    torch.testing.assert_close(got["advantages"], processed.advantages[:8], rtol=0, atol=1e-6)  # rank 0's rows
    assert got["running"] == pytest.approx(running.state_dict())
    for name, value in processed.metrics.items():
        assert got["metrics"][name] == pytest.approx(value, abs=1e-6), name


@pytest.mark.slow
def test_collectives_and_sharding(two_process_result):
    assert two_process_result["sum"] == 3.0
    assert two_process_result["shard"] == [0, 1, 2, 3]  # rank 0: the first two blocks of two


@pytest.mark.slow
@pytest.mark.parametrize("mode", FSDP_MODES)
def test_fsdp_ranks_update_the_parameters_like_one_process(mode, two_process_result, tiny_model_dir):
    params, _, _ = _single_process_update(tiny_model_dir, mode)
    got = two_process_result[f"fsdp/{mode}"]
    assert set(got) >= {k for k in params if k != "lm_head.weight"}
    diff = max(float((got[k] - params[k]).abs().max()) for k in got)
    assert diff <= 1e-6, f"fsdp {mode}: max |diff| {diff:.3g}"


@pytest.mark.slow
def test_fsdp_with_token_budget_micro_batches_updates_like_one_process(two_process_result, tiny_model_dir):
    """The ranks' packings need different numbers of micro-batches; FSDP's per-forward gathers
    would hang unless every rank runs as many. The update is the single process's fixed split's."""
    params, _, _ = _single_process_update(tiny_model_dir, "token-mean")
    got = two_process_result["fsdp/budget"]
    assert len(set(got["counts"])) == 2, got["counts"]
    diff = max(float((got["params"][k] - params[k]).abs().max()) for k in got["params"])
    assert diff <= 1e-6, f"fsdp token budget: max |diff| {diff:.3g}"


@pytest.mark.slow
def test_fsdp_generation_lets_ranks_decode_different_lengths(two_process_result):
    assert two_process_result["fsdp/generation"][1] <= 2  # rank 0's second call, after resharding


@pytest.mark.slow
def test_fsdp_full_state_loads_back_into_a_sharded_model(two_process_result):
    state = two_process_result["fsdp/state"]
    (weights, optim), (weights_again, optim_again) = state["saved"], state["reloaded"]
    assert weights.keys() == weights_again.keys() and len(weights) > 0
    for k in weights:
        assert torch.equal(weights[k], weights_again[k]), k
    assert optim["state"].keys() == optim_again["state"].keys() and len(optim["state"]) > 0
    for i, slot in optim["state"].items():
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(slot[name], optim_again["state"][i][name]), (i, name)


@pytest.mark.slow
def test_a_ddp_critic_learns_like_one_process(two_process_result, tiny_model_dir):
    one = critic_update(str(tiny_model_dir), tiny_batch())
    got = two_process_result["critic"]
    diff = max(float((got["critic"][k] - one["critic"][k]).abs().max()) for k in one["critic"])
    assert diff <= 1e-6, f"critic: max |diff| {diff:.3g}"
    assert got["value_loss"] == pytest.approx(one["value_loss"], rel=1e-5)
    assert got["vf_clipfrac"] == pytest.approx(one["vf_clipfrac"], abs=1e-7)
