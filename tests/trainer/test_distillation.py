"""On-policy distillation in the step: the teacher's log-probs equal a direct forward of the teacher,
its signal enters reward processing as token rewards (policy tokens only), a teacher with another
vocabulary is refused before training (exit 2, naming both), and tiny ``steadyrl train`` runs with
pure and mixed distillation (a LoRA student too)."""

from __future__ import annotations

import pytest
import support
import torch

from steadyrl.cli import main
from steadyrl.config import load_config
from steadyrl.errors import ConfigError
from steadyrl.functional import distillation_token_rewards, masked_whiten
from steadyrl.models import load_policy
from steadyrl.tracking import read_metrics
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards
from steadyrl.trainer.step import prepare

CPU = torch.device("cpu")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """A wider, deeper tiny model of the same character tokenizer, seeded differently."""
    return support.build_tiny_lm(tmp_path_factory.mktemp("teacher"), n_layers=2, hidden_size=48, seed=7)


@pytest.fixture(scope="module")
def foreign_teacher_dir(tmp_path_factory):
    """A tiny model over another vocabulary (all of printable ASCII)."""
    from steadyrl.demo.model import build_tiny_model

    directory = tmp_path_factory.mktemp("foreign_teacher")
    tokenizer = support.char_tokenizer()
    build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, seed=3).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_the_teachers_log_probs_equal_a_direct_forward_of_the_teacher(tiny_model_dir, teacher_dir, tmp_path):
    build = support.length_reward_runs(tiny_model_dir, tmp_path)
    run = build(f"teacher.name_or_path={teacher_dir}", "trainer.micro_batch_size=3", "trainer.logprob_chunk_size=5")
    assert run.models.teacher is not None and not any(p.requires_grad for p in run.models.teacher.parameters())
    batch = support.tiny_batch(seed=2, rows=8, response=6)
    got = prepare(run.config, run.models, run.device, run.optim.kl_controller.value, batch).teacher_logprobs
    teacher = load_policy(str(teacher_dir), dtype=torch.float32, device=CPU)
    with torch.no_grad():
        logits = teacher(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                         position_ids=batch.position_ids).logits.float()
    p, r = batch.prompt_len, batch.response_len
    expected = torch.log_softmax(logits[:, p - 1: p - 1 + r] / run.config.rollout.temperature, -1)
    expected = expected.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-5, atol=1e-5)
    assert got.shape == batch.response_ids.shape


def test_the_distillation_reward_enters_as_token_rewards_on_policy_tokens_only():
    """Pure distillation with REINFORCE++: the advantage is the whitened return-to-go of the
    teacher's per-token reward; an observation hole (policy mask 0) carries none of it."""
    g = torch.Generator().manual_seed(0)
    policy_mask = torch.ones(4, 6, dtype=torch.long)
    policy_mask[0, 2:4] = 0  # a tool's observation between two turns
    policy_mask[1, 5:] = 0  # padding
    old = -torch.rand(4, 6, generator=g) * 3
    teacher = -torch.rand(4, 6, generator=g) * 3
    teacher[0, 2:4] = float("nan")  # the teacher's view of the observation must not matter
    algo = load_config(None, ["algorithm.advantage_estimator=reinforce_plus_plus", "algorithm.kl_mode=none"]).algorithm
    out = process_rewards(RewardInputs(torch.tensor([1.0, 0.0, 5.0, 2.0]), torch.ones(4, dtype=torch.bool),
                                       policy_mask, torch.zeros(4, dtype=torch.bool), 2, old_logprobs=old,
                                       teacher_logprobs=teacher),
                          algo, RewardSettings(distill_coef=0.5, task_rewards=False))
    rewards = distillation_token_rewards(old.double(), teacher.double(), policy_mask, 0.5)
    keep = policy_mask.bool()
    returns = torch.zeros_like(rewards)
    running = torch.zeros(4, dtype=torch.float64)
    for t in reversed(range(6)):
        running = torch.where(keep[:, t], rewards[:, t] + running, running)
        returns[:, t] = running
    expected = torch.where(keep, masked_whiten(returns, keep), torch.zeros((), dtype=torch.float64))
    torch.testing.assert_close(out.advantages.double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(out.advantages).all()
    assert out.metrics["distill/reverse_kl"] == pytest.approx(float((old - teacher)[keep].double().mean()), rel=1e-5)


def test_mixed_distillation_adds_the_teachers_row_sum_to_an_outcome_estimators_score():
    """GRPO reads each row's sum: the task score plus the row's distillation rewards."""
    algo = load_config(None, ["algorithm.kl_mode=none", "algorithm.reward_norm_std=none"]).algorithm
    mask = torch.ones(2, 3, dtype=torch.long)
    old = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    teacher = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])  # the teacher dislikes row 1
    scores = torch.tensor([1.0, 1.0])
    base = process_rewards(RewardInputs(scores, torch.ones(2, dtype=torch.bool), mask,
                                        torch.zeros(2, dtype=torch.bool), 2), algo)
    mixed = process_rewards(RewardInputs(scores, torch.ones(2, dtype=torch.bool), mask,
                                         torch.zeros(2, dtype=torch.bool), 2, old_logprobs=old,
                                         teacher_logprobs=teacher), algo, RewardSettings(distill_coef=1.0))
    assert base.advantages.abs().sum() == 0  # equal scores: no signal without the teacher
    assert (mixed.advantages[0] > 0).all() and (mixed.advantages[1] < 0).all()


def test_a_teacher_with_another_vocabulary_is_refused_naming_both_before_training(
        write_config, foreign_teacher_dir, tiny_model_dir, tmp_path, capsys, monkeypatch):
    import steadyrl.assembly.setup as setup

    loads = []
    monkeypatch.setattr(setup, "load_policy", lambda *a, **k: loads.append(a) or pytest.fail("a model was loaded"))
    config = write_config(teacher={"name_or_path": str(foreign_teacher_dir)})
    assert main(["train", str(config), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "teacher.name_or_path" in err and str(foreign_teacher_dir) in err and str(tiny_model_dir) in err
    from transformers import AutoTokenizer

    sizes = [len(AutoTokenizer.from_pretrained(str(d)).get_vocab()) for d in (foreign_teacher_dir, tiny_model_dir)]
    assert sizes[0] != sizes[1]
    assert f"vocabulary of {sizes[0]} tokens" in err and f"has {sizes[1]}" in err
    assert not loads


def test_a_negative_distillation_weight_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="distill_coef"):
        load_config(None, ["teacher.distill_coef=-1"])


@pytest.mark.parametrize("mode", ["pure", "mixed", "lora"])
def test_a_tiny_train_distils_from_the_teacher(mode, write_config, teacher_dir, tmp_path):
    teacher = {"name_or_path": str(teacher_dir), "distill_coef": 0.5, "task_rewards": mode != "pure"}
    sections = {"teacher": teacher}
    if mode == "pure":
        sections["algorithm"] = {"advantage_estimator": "reinforce_plus_plus", "kl_mode": "none"}
    if mode == "lora":
        sections["model"] = {"lora": {"enabled": True, "r": 4}}
    config = write_config(**sections)
    out = tmp_path / "run"
    assert main(["train", str(config), "--output-dir", str(out)]) == 0
    rows = [r for r in read_metrics(out) if "actor/pg_loss" in r]
    assert len(rows) == 2
    for row in rows:
        assert row["distill/reverse_kl"] == row["distill/reverse_kl"]  # finite, reported each step
        assert row["distill/teacher_logprob_mean"] < 0
