"""On-policy distillation as Thinking Machines run it: the per-token advantage is minus the sampled
token's reverse-KL estimate, ``A_t = -(log pi_student(y_t) - log pi_teacher(y_t))``, no discount, no
whitening. ``advantage_estimator: token_reward`` with ``teacher.task_rewards: false`` gives exactly
that (correlation 1.0); the former recommendation (``reinforce_plus_plus``: whitened returns-to-go)
does not. The oracle is plain float64 Python and imports nothing from steadyrl.functional."""

import math
import random

import torch

from steadyrl.config.schema import AlgorithmConfig
from steadyrl.functional import compute_advantages, distillation_token_rewards
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards

torch.set_num_threads(1)


def _batch(seed: int, rows: int = 8, width: int = 12):
    rng = random.Random(seed)
    lengths = [rng.randint(1, width) for _ in range(rows)]
    mask = [[1 if t < n else 0 for t in range(width)] for n in lengths]
    student = [[-rng.uniform(0.01, 4.0) for _ in range(width)] for _ in range(rows)]
    teacher = [[-rng.uniform(0.01, 6.0) for _ in range(width)] for _ in range(rows)]
    return mask, student, teacher


def _oracle(mask, student, teacher):
    """Thinking Machines' advantage, token by token: -(student - teacher) where the mask is 1, else 0."""
    return [[-(s - t) if m else 0.0 for m, s, t in zip(mr, sr, tr)] for mr, sr, tr in zip(mask, student, teacher)]


def _correlation(xs, ys):
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    return cov / math.sqrt(sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))


def _valid_tokens(mask, values):
    return [v for mr, vr in zip(mask, values) for m, v in zip(mr, vr) if m]


def test_token_reward_is_thinking_machines_per_token_advantage_exactly():
    for seed in range(5):
        mask, student, teacher = _batch(seed)
        m = torch.tensor(mask, dtype=torch.bool)
        rewards = distillation_token_rewards(torch.tensor(student, dtype=torch.float64),
                                             torch.tensor(teacher, dtype=torch.float64), m)
        adv, _ = compute_advantages("token_reward", m, token_rewards=rewards)
        assert adv.dtype == torch.float64
        assert adv.tolist() == _oracle(mask, student, teacher)


def test_the_steps_reward_pipeline_with_the_documented_setting_matches_it_with_correlation_one():
    """Through the trainer's reward processing, as docs/distillation.md's setting runs it (kl_mode none,
    task_rewards false), against the former recommendation (reinforce_plus_plus)."""
    mask, student, teacher = _batch(7, rows=16, width=24)
    oracle = _valid_tokens(mask, _oracle(mask, student, teacher))
    m = torch.tensor(mask, dtype=torch.long)
    correlations = {}
    for estimator in ("token_reward", "reinforce_plus_plus"):
        algo = AlgorithmConfig(advantage_estimator=estimator, kl_mode="none")
        out = process_rewards(RewardInputs(torch.rand(16, dtype=torch.float64), torch.ones(16, dtype=torch.bool), m,
                                           torch.zeros(16, dtype=torch.bool), 4,
                                           old_logprobs=torch.tensor(student, dtype=torch.float64),
                                           teacher_logprobs=torch.tensor(teacher, dtype=torch.float64)),
                              algo, RewardSettings(task_rewards=False))
        ours = _valid_tokens(mask, out.advantages.double().tolist())
        correlations[estimator] = _correlation(ours, oracle)
        if estimator == "token_reward":
            assert max(abs(a - b) for a, b in zip(ours, oracle)) < 1e-5  # float32 advantages
    assert correlations["token_reward"] > 1 - 1e-9
    assert correlations["reinforce_plus_plus"] < 0.9, correlations  # returns-to-go mix later tokens in


def test_token_reward_leaves_padding_and_invalid_samples_at_zero_whatever_they_hold():
    rewards = torch.tensor([[1.0, float("nan"), float("inf")], [2.0, 3.0, -float("inf")]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    adv, returns = compute_advantages("token_reward", mask, token_rewards=rewards,
                                      sample_mask=torch.tensor([True, False]))
    assert adv.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]] and returns is adv
