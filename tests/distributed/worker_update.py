"""Run by ``torchrun --nproc_per_node 2`` from test_data_parallel.py (gloo, CPU): one update and
one reward processing on each rank's half of a fixed global batch, through the trainer's own
code (DDP-wrapped :class:`PolicyLogprobs`, :func:`ppo_update`, :func:`gather_samples` +
:func:`process_rewards`). Rank 0 writes the results to ``OUT/result.pt``; the test compares them
with a single process on the whole batch.

    torchrun --nproc_per_node 2 worker_update.py MODEL_DIR OUT_DIR
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dp_common import FSDP_MODES, LOSS_MODES, critic_update, score_result, step_config, tiny_batch  # noqa: E402,E501

from steadyrl import distributed as dist  # noqa: E402
from steadyrl.functional import RunningMoments  # noqa: E402
from steadyrl.models import load_policy  # noqa: E402
from steadyrl.rollout import Generation  # noqa: E402
from steadyrl.trainer.forward import PolicyLogprobs  # noqa: E402
from steadyrl.trainer.global_batch import gather_samples  # noqa: E402
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards  # noqa: E402
from steadyrl.trainer.update import ppo_update  # noqa: E402

CPU = torch.device("cpu")
BUDGET = 14  # tokens per micro-batch (token-budget packing)

try:  # transformers' "Loading weights" bars drown the output
    from transformers.utils import logging as _hf_logging

    _hf_logging.disable_progress_bar()
except ImportError:  # pragma: no cover
    pass


def _fsdp_token_budget(model_dir: str, mine: slice) -> dict:
    """FSDP with token-budget micro-batches whose natural counts differ between the ranks."""
    from steadyrl.trainer.packing import row_extents, token_budget_batches

    part = tiny_batch().select(mine)
    counts = dist.gather_objects(len(token_budget_batches(*row_extents(part), BUDGET)))
    policy = load_policy(model_dir, dtype=torch.float32, device=CPU)
    sharded = dist.wrap_model(PolicyLogprobs(policy), "fsdp", CPU, layers_of=policy)
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    ppo_update(sharded, opt, part, step_config("token-mean", f"trainer.max_tokens_per_micro_batch={BUDGET}"),
               kl_coef=0.1, device=CPU)
    return {"counts": counts, "params": dist.full_model_state_dict(policy)}


def main(model_dir: str, out: Path) -> None:
    torch.set_num_threads(1)
    assert dist.init_from_env(use_cuda=False) and dist.world_size() == 2
    rows = tiny_batch().input_ids.shape[0]
    mine = slice(dist.rank() * rows // 2, (dist.rank() + 1) * rows // 2)
    result: dict = {"shard": dist.shard(list(range(8)), unit=2), "sum": dist.all_reduce_sum(dist.rank() + 1)}
    for mode in LOSS_MODES:
        policy = load_policy(model_dir, dtype=torch.float32, device=CPU)
        wrapped = dist.wrap_model(PolicyLogprobs(policy), "ddp", CPU, layers_of=policy)
        opt = torch.optim.SGD(policy.parameters(), lr=0.1)
        metrics, steps, skipped = ppo_update(wrapped, opt, tiny_batch().select(mine), step_config(mode),
                                             kl_coef=0.1, device=CPU)
        params = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        other = dist.gather_objects(params)[1]
        result[mode] = {"params": params, "metrics": metrics, "steps": (steps, skipped),
                        "ranks_agree": all(torch.equal(params[k], other[k]) for k in params)}
    for mode in FSDP_MODES:
        policy = load_policy(model_dir, dtype=torch.float32, device=CPU)
        sharded = dist.wrap_model(PolicyLogprobs(policy), "fsdp", CPU, layers_of=policy)
        opt = torch.optim.SGD(policy.parameters(), lr=0.1)
        ppo_update(sharded, opt, tiny_batch().select(mine), step_config(mode), kl_coef=0.1, device=CPU)
        result[f"fsdp/{mode}"] = dist.full_model_state_dict(policy)
    result["fsdp/budget"] = _fsdp_token_budget(model_dir, mine)
    result["fsdp/generation"], result["fsdp/state"] = _fsdp_generation_and_state(model_dir, mine)
    result["critic"] = critic_update(model_dir, tiny_batch().select(mine),
                                     wrap=lambda module, layers: dist.wrap_model(module, "ddp", CPU, layers_of=layers))
    result["processing"] = _processing(mine)
    if dist.is_main():
        torch.save(result, out / "result.pt")
    dist.barrier()
    dist.teardown()


def _fsdp_generation_and_state(model_dir: str, mine: slice):
    """FSDP2 (on gloo: the CUDA-only parts aside): generation through FSDPGenerator with a
    different length on each rank, then an AdamW update whose full weights and optimizer state,
    saved and loaded into a freshly sharded model, come back identical."""
    from steadyrl.models import load_tokenizer
    from steadyrl.rollout import HFEngine

    policy = load_policy(model_dir, dtype=torch.float32, device=CPU)
    sharded = dist.wrap_model(PolicyLogprobs(policy), "fsdp", CPU, layers_of=policy)
    tokenizer = load_tokenizer(model_dir)
    engine = HFEngine(dist.FSDPGenerator(sharded, policy), tokenizer)
    torch.manual_seed(dist.rank())
    lengths = []
    for new_tokens in (3 + 4 * dist.rank(), 2):  # ranks decode different numbers of tokens
        gen = engine.generate([tokenizer("abc=")["input_ids"]], 2, max_new_tokens=new_tokens)
        lengths.append(gen.response_ids.shape[1])
    opt = torch.optim.AdamW(policy.parameters(), lr=0.01)
    ppo_update(sharded, opt, tiny_batch().select(mine), step_config("token-mean"), kl_coef=0.1, device=CPU)
    weights, state = dist.full_model_state_dict(policy), dist.full_optimizer_state_dict(policy, opt)
    shared = dist.gather_objects((weights, state))[0]  # rank 0's full copies, to every rank
    fresh = load_policy(model_dir, dtype=torch.float32, device=CPU)
    dist.wrap_model(PolicyLogprobs(fresh), "fsdp", CPU, layers_of=fresh)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.01)
    dist.load_full_model_state_dict(fresh, shared[0])
    dist.load_full_optimizer_state_dict(fresh, fresh_opt, shared[1])
    again = (dist.full_model_state_dict(fresh), dist.full_optimizer_state_dict(fresh, fresh_opt))
    return lengths, {"saved": shared, "reloaded": again}


def _processing(mine: slice) -> dict:
    """Batch-level statistics through gather_samples: each rank's rows of the global result."""
    batch = tiny_batch().select(mine)
    gen = Generation(prompt_ids=batch.input_ids[:, :4], prompt_mask=batch.attention_mask[:, :4],
                     response_ids=batch.response_ids, response_mask=batch.response_mask,
                     truncated=torch.zeros(len(batch), dtype=torch.bool), completions=[""] * len(batch))
    whole = gather_samples(score_result(mine), gen, batch, [4] * (len(batch) // 4))
    running = RunningMoments()
    processed = process_rewards(RewardInputs(whole.result.scores, whole.result.valid, whole.response_mask,
                                             whole.truncated, 4),
                                step_config("token-mean").algorithm, RewardSettings(running=running))
    return {"advantages": whole.mine(processed.advantages), "metrics": processed.metrics,
            "running": running.state_dict(), "rows": len(whole.result.scores)}


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
