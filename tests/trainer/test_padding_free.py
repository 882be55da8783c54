"""Padding-free micro-batches (trainer.padding_free): the packed row, the log-probs and entropy of
both log-prob paths, the update for every loss aggregation and a whole run equal the padded
forward's; the token budget then counts real tokens; a model whose attention ignores the
restarting position ids is refused at start-up."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from steadyrl.errors import ConfigError
from steadyrl.models import load_policy
from steadyrl.trainer.forward import response_logprobs
from steadyrl.trainer.packing import (check_padding_free, micro_batch_plan, pack_rows, row_extents,
                                      token_budget_batches)

from .test_token_budget import CPU, MODES, _update, mixed_batch


def test_pack_rows_puts_the_real_tokens_back_to_back_with_positions_restarting():
    # row 0: prompt [pad, 5, 6], response [7, 8, pad]; row 1: prompt [4, 5, 6], response [9, pad, pad]
    input_ids = torch.tensor([[0, 5, 6, 7, 8, 0], [4, 5, 6, 9, 0, 0]])
    attention = torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    ids, pos, index = pack_rows(input_ids, attention, positions, 3, 3)
    assert ids.tolist() == [[5, 6, 7, 8, 4, 5, 6, 9]]
    assert pos.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]
    # the state before each response token: row 0's 6, 7, 8 (packed 1, 2, 3); row 1's 6, 9 and padding (0)
    assert index.tolist() == [[1, 2, 3], [6, 7, 0]]


def test_pack_rows_refuses_positions_that_do_not_count_each_row_from_zero():
    input_ids = torch.tensor([[5, 6, 7]])
    attention = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="trainer.padding_free"):
        pack_rows(input_ids, attention, torch.tensor([[3, 4, 5]]), 2, 1)


@pytest.mark.parametrize("impl", ["fused", "naive"])
@pytest.mark.parametrize("multi_turn", [False, True])
def test_logprobs_and_entropy_equal_the_padded_forward(impl, multi_turn, tiny_model_dir):
    policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    batch = mixed_batch(seed=4, multi_turn=multi_turn)
    kwargs = {"temperature": 0.7, "impl": impl, "with_entropy": True}
    padded_logp, padded_entropy = response_logprobs(policy, batch, share_prefix=False, **kwargs)
    logp, entropy = response_logprobs(policy, batch, padding_free=True, **kwargs)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(logp[mask], padded_logp[mask], rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy[mask], padded_entropy[mask], rtol=0, atol=1e-5)
    assert torch.isfinite(logp).all() and torch.isfinite(entropy).all()  # padding columns too


def test_gradients_equal_the_padded_forward(tiny_model_dir):
    """Including no gradient at all from padding positions (they are gathered from packed index 0)."""
    batch = mixed_batch(seed=5, multi_turn=True)
    grads = []
    for padding_free in (False, True):
        policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
        logp, _ = response_logprobs(policy, batch, temperature=1.0, share_prefix=False, padding_free=padding_free)
        (logp * batch.policy_mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None]))
    assert grads[0].abs().max() > 0
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", MODES)
def test_update_equals_the_fixed_split(mode, tiny_model_dir):
    batch = mixed_batch(multi_turn=True)
    common = [f"algorithm.loss_agg_mode={mode}", "trainer.mini_batch_size=6", "trainer.ppo_epochs=2",
              "trainer.seed=0", "trainer.micro_batch_size=4"]
    torch.manual_seed(0)
    fixed, fixed_metrics, fixed_steps = _update(tiny_model_dir, batch, *common)
    torch.manual_seed(0)
    packed, packed_metrics, packed_steps = _update(tiny_model_dir, batch, "trainer.padding_free=true", *common)
    assert fixed_steps == packed_steps == (4, 0)
    torch.testing.assert_close(packed, fixed, rtol=1e-6, atol=1e-9)
    for key, value in fixed_metrics.items():
        assert packed_metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


def test_the_token_budget_counts_real_tokens_when_padding_free():
    batch = mixed_batch(seed=6)
    prompt, response = row_extents(batch)
    lengths = prompt + response
    padded = token_budget_batches(prompt, response, 40)
    packed = token_budget_batches(prompt, response, 40, padding_free=True)
    for rows in packed:
        assert int(lengths[rows].sum()) <= 40 or len(rows) == 1
    assert len(packed) < len(padded)  # the same budget holds more rows once padding is not counted
    plan = micro_batch_plan(batch, 4, 40, padding_free=True)
    assert [rows.tolist() for rows, _ in plan] == [rows.tolist() for rows in packed]
    assert torch.equal(torch.cat(packed).sort().values, torch.arange(len(batch)))


class _Mixing(nn.Module):
    """A 'model' whose layer ignores position ids and the mask: every token sees the whole row."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 4)
        self.config = SimpleNamespace(model_type="mixing", _attn_implementation="custom")

    def get_input_embeddings(self):
        return self.embed

    def forward(self, input_ids, position_ids=None, attention_mask=None, use_cache=False, output_hidden_states=True):
        states = self.embed(input_ids).cumsum(1)
        return SimpleNamespace(hidden_states=(states,), logits=states)


def test_a_model_that_attends_across_packed_sequences_is_refused():
    with pytest.raises(ConfigError, match=r"trainer.padding_free = true.*mixing.*padding_free=false"):
        check_padding_free(_Mixing())


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_real_model_passes_the_check_and_packs_exactly(attention, tiny_model_dir):
    policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU, attn_implementation=attention)
    assert policy.config._attn_implementation == attention
    check_padding_free(policy)
    batch = mixed_batch(seed=7)
    padded, _ = response_logprobs(policy, batch, temperature=1.0, share_prefix=False)
    packed, _ = response_logprobs(policy, batch, temperature=1.0, padding_free=True)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(packed[mask], padded[mask], rtol=0, atol=1e-5)


def test_a_run_padding_free_logs_the_metrics_of_the_padded_run(write_config, task_dir, tmp_path):
    """Whole GRPO steps with a reference model (old, reference and policy passes)."""
    from steadyrl.tracking import read_jsonl
    from steadyrl.recipe import train

    logs = []
    for name, extra in (("padded", {}), ("packed", {"padding_free": True})):
        path = write_config(algorithm={"kl_mode": "loss", "kl_coef": 0.05},
                            rewards=[{"name": f"{task_dir / 'rewards.py'}:partial_reverse"}],
                            trainer={"max_steps": 2, "save_every": 0, "samples_every": 0, "device": "cpu",
                                     "seed": 3, "share_prompt_prefix": False, **extra})
        train(str(path), [], output_dir=str(tmp_path / name), overwrite=True)
        logs.append([row for row in read_jsonl(tmp_path / name / "metrics.jsonl") if "actor/loss" in row])
    padded, packed = logs
    assert len(padded) == len(packed) == 2
    for a, b in zip(padded, packed):
        keys = [k for k in a if not k.startswith(("time/", "throughput/"))]
        assert "actor/kl_loss" in keys and a["actor/grad_norm"] > 0
        for k in keys:
            assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6), k

