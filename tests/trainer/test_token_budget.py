"""Token-budget micro-batches (trainer.max_tokens_per_micro_batch): the packing respects the
budget and takes every row once, and the update (parameters, metrics) and the no-grad log-prob
passes equal the fixed micro_batch_size split's, single- and multi-turn."""

from dataclasses import fields, replace

import pytest
import torch

from steadyrl.config import load_config
from steadyrl.functional import POLICY_LOSSES
from steadyrl.models import load_policy
from steadyrl.trainer.batch import ITEMS, LAYOUTS, RESPONSE, ROW, SEQUENCE, TrainBatch, layout_of
from steadyrl.trainer.forward import response_logprobs
from steadyrl.trainer.packing import (micro_batch_plan, padding_stats, row_extents, split_to, token_budget_batches,
                                      trim)
from steadyrl.trainer.step import _per_token
from steadyrl.trainer.update import ppo_update

CPU = torch.device("cpu")
MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def mixed_batch(seed: int = 0, groups: int = 3, group_size: int = 4, prompt: int = 7, response: int = 12,
                multi_turn: bool = False) -> TrainBatch:
    """Groups sharing a left-padded prompt of their own length, responses from 1 to ``response``
    tokens (right padding); ``multi_turn``: observation tokens (attended, not trained) in the middle."""
    g = torch.Generator().manual_seed(seed)
    rows = groups * group_size
    prompt_lens = torch.randint(2, prompt + 1, (groups,), generator=g).repeat_interleave(group_size)
    prompt_ids = torch.randint(3, 12, (groups, prompt), generator=g).repeat_interleave(group_size, 0)
    prompt_mask = (torch.arange(prompt) >= prompt - prompt_lens.unsqueeze(1)).long()
    prompt_ids = prompt_ids * prompt_mask
    lengths = torch.randint(1, response + 1, (rows,), generator=g)
    lengths[0], lengths[5] = response, 1  # the longest and the shortest possible
    response_mask = (torch.arange(response) < lengths.unsqueeze(1)).long()
    response_ids = torch.randint(3, 12, (rows, response), generator=g) * response_mask
    policy_mask = response_mask.clone()
    if multi_turn:
        policy_mask[:, 2:4] = 0  # an observation: attended to, not the policy's
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    loss_mask = policy_mask.clone()
    loss_mask[3] = 0  # a sample excluded from the loss
    return TrainBatch(
        input_ids=torch.cat([prompt_ids, response_ids], 1), attention_mask=attention_mask,
        position_ids=(attention_mask.cumsum(-1) - 1).clamp(min=0), response_ids=response_ids,
        response_mask=response_mask, policy_mask=policy_mask, loss_mask=loss_mask,
        advantages=torch.randn(rows, response, generator=g, dtype=torch.float64) * loss_mask,
        ref_logprobs=-2.5 + 0.3 * torch.randn(rows, response, generator=g, dtype=torch.float64),
        old_logprobs=-2.4 + 0.2 * torch.randn(rows, response, generator=g, dtype=torch.float64),
        sample_weights=torch.rand(rows, generator=g, dtype=torch.float64) + 0.5,
    )


def test_micro_batches_respect_the_budget_and_take_every_row_once():
    g = torch.Generator().manual_seed(1)
    prompt, response = torch.randint(1, 20, (50,), generator=g), torch.randint(0, 60, (50,), generator=g)
    for budget in (30, 80, 200, 1000):
        parts = token_budget_batches(prompt, response, budget)
        rows = torch.cat(parts).sort().values
        assert torch.equal(rows, torch.arange(50))
        for part in parts:
            cost = len(part) * int(prompt[part].max() + response[part].max())
            assert cost <= budget or len(part) == 1, (budget, part, cost)
    # a row longer than the budget goes alone; the others still pack together
    parts = token_budget_batches(torch.tensor([1, 1, 1]), torch.tensor([100, 2, 2]), 10)
    assert [p.tolist() for p in parts] == [[0], [1, 2]]


def test_packing_groups_rows_of_similar_length():
    """Longest first: the long rows do not pad the short ones."""
    prompt = torch.full((8,), 4)
    response = torch.tensor([50, 2, 48, 3, 49, 2, 47, 1])
    parts = token_budget_batches(prompt, response, 4 * 60)
    assert [sorted(p.tolist()) for p in parts] == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_trim_drops_only_padding_and_keeps_positions():
    batch = mixed_batch(multi_turn=True)
    rows = torch.tensor([1, 5, 9])
    part = batch.select(rows)
    cut = trim(part)
    prompt, response = row_extents(part)
    assert cut.prompt_len == int(prompt.max()) and cut.response_len == int(response.max())
    assert cut.response_len < part.response_len or cut.prompt_len < part.prompt_len
    for name in ("input_ids", "attention_mask", "position_ids"):  # the real tokens, unchanged
        full, kept = getattr(part, name), getattr(cut, name)
        assert torch.equal(full[:, part.prompt_len - cut.prompt_len : part.prompt_len + cut.response_len], kept)
    assert int(cut.attention_mask.sum()) == int(part.attention_mask.sum())
    assert int(cut.loss_mask.sum()) == int(part.loss_mask.sum())
    assert torch.equal(cut.sample_weights, part.sample_weights)


def _every_field(batch: TrainBatch) -> TrainBatch:
    """``batch`` with every optional field filled (distinct values per column, so a wrong cut shows)."""
    g = torch.Generator().manual_seed(9)
    rows, width = batch.response_ids.shape
    filled = {}
    for f in fields(TrainBatch):
        if getattr(batch, f.name) is None and layout_of(f) == RESPONSE:
            filled[f.name] = torch.randn(rows, width, generator=g, dtype=torch.float64)
    filled["selected"] = torch.rand(rows, width, generator=g) < 0.5
    return replace(batch, **filled)


def test_every_batch_field_declares_its_layout():
    """Row selection, moving and trim go over the fields by layout: none may lack one."""
    assert {f.name: layout_of(f) for f in fields(TrainBatch)}  # layout_of refuses a field without one
    assert all(layout_of(f) in LAYOUTS for f in fields(TrainBatch))
    for name in ("old_entropy", "token_weights", "selected", "teacher_logprobs", "advantages"):
        assert layout_of(next(f for f in fields(TrainBatch) if f.name == name)) == RESPONSE


def test_trim_narrows_every_per_token_field_by_its_layout():
    """Before: old_entropy, token_weights and selected kept their full width, and the first update
    with a token budget and a selection (top_entropy_quantile, kl_cov, clip_cov) failed on a size
    mismatch."""
    batch = _every_field(mixed_batch(multi_turn=True))
    part = batch.select(torch.tensor([1, 5, 9]))
    cut = trim(part)
    p, r = cut.prompt_len, cut.response_len
    assert r < part.response_len
    for f in fields(TrainBatch):
        full, kept = getattr(part, f.name), getattr(cut, f.name)
        if full is None:
            continue
        layout = layout_of(f)
        if layout == SEQUENCE:
            assert torch.equal(kept, full[:, part.prompt_len - p : part.prompt_len + r]), f.name
        elif layout == RESPONSE:
            assert torch.equal(kept, full[:, :r]), f.name
        else:
            assert layout in (ROW, ITEMS) and kept is full, f.name


def test_padding_stats_show_less_padding_with_a_budget():
    batch = mixed_batch(groups=4)
    real, fixed = padding_stats(batch, micro_batch_plan(batch, 4, None))
    real2, packed = padding_stats(batch, micro_batch_plan(batch, 4, 60))
    assert real == real2 and real < packed < fixed


def _config(*overrides):
    return load_config(None, ["trainer.device=cpu", "algorithm.kl_mode=loss", "algorithm.kl_coef=0.1",
                              "algorithm.entropy_coef=0.01", *overrides])


def _update(tiny_model_dir, batch, *overrides):
    policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    opt = torch.optim.SGD(policy.parameters(), lr=0.05)
    metrics, steps, skipped = ppo_update(policy, opt, batch, _config(*overrides), kl_coef=0.1, device=CPU)
    return torch.cat([p.detach().flatten() for p in policy.parameters()]), metrics, (steps, skipped)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("multi_turn", [False, True])
def test_token_budget_update_equals_the_fixed_split(mode, multi_turn, tiny_model_dir):
    """Same parameters after the update and same metrics, for every loss aggregation (a float64
    model; the log-probs are float32, so float32 tolerances)."""
    batch = mixed_batch(multi_turn=multi_turn)
    common = [f"algorithm.loss_agg_mode={mode}", "trainer.mini_batch_size=6", "trainer.ppo_epochs=2",
              "trainer.seed=0"]
    torch.manual_seed(0)
    fixed, fixed_metrics, fixed_steps = _update(tiny_model_dir, batch, "trainer.micro_batch_size=4", *common)
    torch.manual_seed(0)  # the same mini-batch shuffles
    packed, packed_metrics, packed_steps = _update(tiny_model_dir, batch, "trainer.max_tokens_per_micro_batch=40",
                                                   *common)
    assert fixed_steps == packed_steps == (4, 0)
    start = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    moved = fixed - torch.cat([p.detach().flatten() for p in start.parameters()])
    assert moved.abs().max() > 1e-4  # the comparison is not vacuous
    # log-probs are float32 (forward.response_logprobs) and the trimmed widths change its rounding
    torch.testing.assert_close(packed, fixed, rtol=1e-6, atol=1e-9)
    assert packed_metrics.keys() == fixed_metrics.keys()
    for key, value in fixed_metrics.items():
        assert packed_metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


SELECTIONS = {"none": [], "entropy": ["algorithm.top_entropy_quantile=0.3"]}
LOSS_OPTIONS = {"kl_cov": ["algorithm.kl_cov_ratio=0.1"],
                "clip_cov": ["algorithm.clip_cov_ratio=0.2", "algorithm.clip_cov_lb=-10"]}


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
@pytest.mark.parametrize("loss", sorted(POLICY_LOSSES))
def test_token_budget_update_equals_the_fixed_split_for_every_loss_and_selection(loss, selection, tiny_model_dir):
    """Every policy loss, with and without the entropy selection (kl_cov / clip_cov select by
    covariance themselves): the budget's trimmed micro-batches give the fixed split's update."""
    g = torch.Generator().manual_seed(4)
    batch = mixed_batch(multi_turn=loss == "kl_cov")
    batch = replace(batch, old_entropy=torch.rand(batch.response_ids.shape, generator=g, dtype=torch.float64) * 3)
    common = [f"algorithm.policy_loss={loss}", *LOSS_OPTIONS.get(loss, []), *SELECTIONS[selection],
              "trainer.mini_batch_size=6", "trainer.ppo_epochs=2", "trainer.seed=0"]
    torch.manual_seed(0)  # the same mini-batch shuffles and clip_cov draws
    fixed, fixed_metrics, fixed_steps = _update(tiny_model_dir, batch, "trainer.micro_batch_size=4", *common)
    torch.manual_seed(0)
    packed, packed_metrics, packed_steps = _update(tiny_model_dir, batch, "trainer.max_tokens_per_micro_batch=40",
                                                   *common)
    assert fixed_steps == packed_steps == (4, 0)
    torch.testing.assert_close(packed, fixed, rtol=1e-6, atol=1e-9)
    assert packed_metrics.keys() == fixed_metrics.keys()
    for key, value in fixed_metrics.items():
        assert packed_metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    if selection == "entropy":
        assert 0.0 < fixed_metrics["actor/entropy_selected_frac"] < 1.0
    if loss in LOSS_OPTIONS:
        assert fixed_metrics["actor/cov_selected_frac"] > 0


def test_the_budget_changes_how_the_mini_batch_is_split(tiny_model_dir):
    """The equality above is not the fixed split running twice: the plans differ."""
    batch = mixed_batch()
    fixed = micro_batch_plan(batch, 4, None)
    packed = micro_batch_plan(batch, 4, 40)
    assert [len(range(12)[s]) for s, _ in fixed] == [4, 4, 4]
    assert sorted(len(r) for r, _ in packed) != [4, 4, 4]


@pytest.mark.parametrize("multi_turn", [False, True])
def test_no_grad_logprob_passes_equal_the_fixed_split(multi_turn, tiny_model_dir):
    """prepare's passes: each row's log-probs land in its own row, equal on every attended token."""
    policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    batch = mixed_batch(seed=2, multi_turn=multi_turn)

    def fn(m):
        return response_logprobs(policy, m, temperature=1.0)[0]

    fixed = _per_token(fn, batch, 4, CPU)
    packed = _per_token(fn, batch, 4, CPU, max_tokens=30)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(packed[mask], fixed[mask], rtol=0, atol=1e-5)
    assert torch.isfinite(packed).all()  # padding columns: finite (0 past a micro-batch's longest row)


def test_budget_none_is_todays_split():
    batch = mixed_batch()
    plan = micro_batch_plan(batch, 5, None)
    assert [(s.start, s.stop, t) for s, t in plan] == [(0, 5, False), (5, 10, False), (10, 12, False)]


def test_config_rejects_a_budget_below_one():
    from steadyrl.errors import ConfigError

    with pytest.raises(ConfigError, match="max_tokens_per_micro_batch"):
        load_config(None, ["trainer.max_tokens_per_micro_batch=0"])


def test_trim_of_a_batch_without_padding_is_the_batch():
    batch = mixed_batch()
    full = replace(batch, attention_mask=torch.ones_like(batch.attention_mask))
    assert trim(full) is full


def test_a_ppo_run_with_a_budget_logs_the_metrics_of_the_fixed_split(write_config, task_dir, tmp_path):
    """Whole steps (old, reference and critic passes, two epochs, the critic update): the same
    metrics, the budget only changes how the rows are grouped."""
    from steadyrl.tracking import read_jsonl
    from steadyrl.recipe import train

    logs = []
    for name, trainer in (("fixed", {"micro_batch_size": 4}), ("budget", {"max_tokens_per_micro_batch": 40})):
        path = write_config(algorithm={"preset": "ppo", "kl_mode": "loss", "kl_coef": 0.05},
                            rewards=[{"name": f"{task_dir / 'rewards.py'}:partial_reverse"}],
                            trainer={"max_steps": 2, "save_every": 0, "samples_every": 0, "device": "cpu",
                                     "ppo_epochs": 2, "mini_batch_size": 8, "seed": 3, **trainer})
        train(str(path), [], output_dir=str(tmp_path / name), overwrite=True)
        logs.append(read_jsonl(tmp_path / name / "metrics.jsonl"))
    fixed, budget = ([row for row in log if "actor/loss" in row] for log in logs)
    assert len(fixed) == len(budget) == 2
    for a, b in zip(fixed, budget):
        keys = [k for k in a if not k.startswith(("time/", "throughput/"))]
        assert "critic/value_loss" in keys and "actor/kl_loss" in keys and a["actor/grad_norm"] > 0
        assert sorted(keys) == sorted(k for k in b if not k.startswith(("time/", "throughput/")))
        for k in keys:
            assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6), k


def test_processes_run_as_many_micro_batches_as_the_busiest_one(monkeypatch):
    """FSDP gathers parameters in every forward: every process must run the same number."""
    from steadyrl import distributed as dist

    batch = mixed_batch()
    alone = micro_batch_plan(batch, 4, 60)
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_reduce_max", lambda n: float(len(alone) + 3))  # another process has more
    plan = micro_batch_plan(batch, 4, 60)
    assert len(plan) == len(alone) + 3
    assert torch.equal(torch.cat([rows for rows, _ in plan]).sort().values, torch.arange(len(batch)))
    prompt, response = row_extents(batch)
    for rows, _ in plan:
        assert len(rows) * int(prompt[rows].max() + response[rows].max()) <= 60 or len(rows) == 1
    with pytest.raises(ValueError, match="cannot split 2 rows into 3"):
        split_to([torch.tensor([0]), torch.tensor([1])], 3)
