"""On-policy distillation's token reward against a float64 oracle written from the formula
(``-coef * clamp(log pi_s - log pi_t, -40, 40)`` on policy tokens; arXiv 2306.13649), and on hostile inputs."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyrl.functional import distillation_metrics, distillation_token_rewards


def oracle(student, teacher, mask, coef, clamp=40.0):
    return [[-coef * max(-clamp, min(clamp, s - t)) if m else 0.0 for s, t, m in zip(rs, rt, rm)]
            for rs, rt, rm in zip(student, teacher, mask)]


def test_distillation_reward_matches_the_formula_in_float64():
    g = torch.Generator().manual_seed(0)
    student = -3 * torch.rand(4, 7, generator=g, dtype=torch.float64)
    teacher = -3 * torch.rand(4, 7, generator=g, dtype=torch.float64)
    mask = (torch.rand(4, 7, generator=g) > 0.3).long()
    got = distillation_token_rewards(student, teacher, mask, coef=0.7)
    assert got.dtype == torch.float64
    expected = torch.tensor(oracle(student.tolist(), teacher.tolist(), mask.tolist(), 0.7), dtype=torch.float64)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-15)


def test_a_token_the_teacher_likes_more_than_the_student_is_rewarded():
    got = distillation_token_rewards(torch.tensor([[-2.0, -0.1]]), torch.tensor([[-0.5, -3.0]]),
                                     torch.ones(1, 2), coef=1.0)
    assert got[0, 0] > 0 > got[0, 1]
    torch.testing.assert_close(got, torch.tensor([[1.5, -2.9]]))


def test_observation_tokens_and_padding_get_nothing_even_when_the_teacher_says_nan():
    """Multi-turn holes: the teacher's log-probs of observation tokens may be anything."""
    student = torch.tensor([[-1.0, -1.0, -1.0, 0.0]])
    teacher = torch.tensor([[-2.0, float("nan"), -math.inf, float("nan")]])
    mask = torch.tensor([[1, 0, 0, 0]])
    got = distillation_token_rewards(student, teacher, mask)
    torch.testing.assert_close(got, torch.tensor([[-1.0, 0.0, 0.0, 0.0]]))  # surer than the teacher
    metrics = distillation_metrics(student, teacher, mask)
    assert metrics["distill/reverse_kl"] == pytest.approx(1.0)
    assert metrics["distill/teacher_logprob_mean"] == pytest.approx(-2.0)


def test_an_empty_mask_gives_zeros_and_zero_metrics():
    z = torch.zeros(2, 3)
    assert distillation_token_rewards(z - 1, z - 5, z).abs().sum() == 0
    assert distillation_metrics(z - 1, z - 5, z) == {"distill/reverse_kl": 0.0, "distill/teacher_logprob_mean": 0.0}


def test_bad_arguments_are_refused_by_name():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="coef must be >= 0"):
        distillation_token_rewards(x, x, x, coef=-1)
    with pytest.raises(ValueError, match="shapes differ"):
        distillation_token_rewards(x, torch.zeros(1, 3), x)


logprob = st.one_of(st.floats(-1e30, 0.0), st.sampled_from([-1e-45, -1e-8, 0.0, -1e4, -3.4e38]))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(st.tuples(logprob, logprob, st.booleans()), min_size=1, max_size=6),
                     min_size=1, max_size=4),
       coef=st.floats(0.0, 10.0), dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]))
def test_distillation_reward_is_finite_bounded_and_masked_for_hostile_log_probs(rows, coef, dtype):
    width = max(len(r) for r in rows)
    pad = [(0.0, float("nan"), False)]
    rows = [r + pad * (width - len(r)) for r in rows]  # NaN teacher log-probs on the padding
    student = torch.tensor([[s for s, _, _ in r] for r in rows]).to(dtype)
    teacher = torch.tensor([[t for _, t, _ in r] for r in rows]).to(dtype)
    mask = torch.tensor([[m for _, _, m in r] for r in rows])
    got = distillation_token_rewards(student, teacher, mask, coef=coef)
    assert got.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert torch.isfinite(got).all()
    assert (got.abs() <= coef * 40.0 * (1 + 1e-6)).all()  # float32 rounding of coef * 40
    assert (got[~mask] == 0).all()
    lowest = torch.finfo(got.dtype).min  # fp16's overflow to -inf counts as the lowest finite log-prob
    wide = [x.double().nan_to_num(0.0).clamp(min=lowest).tolist() for x in (student, teacher)]
    expected = oracle(*wide, mask.tolist(), coef)
    torch.testing.assert_close(got.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-6, atol=1e-4)
    metrics = distillation_metrics(student, teacher, mask)
    assert all(math.isfinite(v) for v in metrics.values())
