"""Named presets: explicit sets of defaults for the ``algorithm`` section, and the demo run.

A preset only fills keys the user left unset; whatever the user writes wins, and
``steadyrl config show`` marks every value that came from a preset. Nothing is rewritten
behind the user's back.
"""

from __future__ import annotations

from typing import Any

ALGORITHM_PRESETS: dict[str, dict[str, Any]] = {
    # GRPO (DeepSeekMath): group mean/std advantages, clipped surrogate, k3 KL as a loss term.
    "grpo": {
        "advantage_estimator": "grpo",
        "norm_by_std": True,
        "policy_loss": "ppo",
        "loss_agg_mode": "token-mean",
        "kl_mode": "loss",
        "kl_estimator": "k3",
        "kl_coef": 0.001,
    },
    # Dr. GRPO (Liu et al., 2025): no std division, no length normalisation, no KL term.
    "dr_grpo": {
        "advantage_estimator": "grpo",
        "norm_by_std": False,
        "policy_loss": "ppo",
        "loss_agg_mode": "seq-mean-token-sum-norm",
        "kl_mode": "none",
    },
    # PPO with a critic: GAE (lambda 0.95, gamma 1.0), whitened advantages, k1 KL in the reward.
    "ppo": {
        "advantage_estimator": "gae",
        "policy_loss": "ppo",
        "loss_agg_mode": "token-mean",
        "whiten_advantages": True,
        "kl_mode": "reward",
        "kl_estimator": "k1",
        "kl_coef": 0.001,
        "gamma": 1.0,
        "lam": 0.95,
        "value_clip": 0.5,
    },
    # RLOO (Ahmadian et al., 2024): leave-one-out baseline, k1 KL subtracted from the reward.
    "rloo": {
        "advantage_estimator": "rloo",
        "policy_loss": "ppo",
        "loss_agg_mode": "token-mean",
        "kl_mode": "reward",
        "kl_estimator": "k1",
        "kl_coef": 0.05,
    },
    # REINFORCE++ (Hu, 2025): whitened returns-to-go of token rewards with a per-token KL penalty.
    "reinforce_plus_plus": {
        "advantage_estimator": "reinforce_plus_plus",
        "policy_loss": "ppo",
        "loss_agg_mode": "token-mean",
        "kl_mode": "reward",
        "kl_estimator": "k1",
        "kl_coef": 0.01,
        "gamma": 1.0,
    },
    # GSPO (Zheng et al., 2025): GRPO advantages with a length-normalised sequence ratio, whose
    # clip ranges are tiny (the paper's 3e-4 / 4e-4) and whose loss averages per sequence.
    "gspo": {
        "advantage_estimator": "grpo",
        "norm_by_std": True,
        "policy_loss": "gspo",
        "loss_agg_mode": "seq-mean-token-mean",
        "pg_clip_low": 3e-4,
        "pg_clip_high": 4e-4,
        "kl_mode": "none",
    },
    # CISPO (MiniMax-M1, 2025): GRPO advantages, the importance weight clipped and detached so no
    # token loses its gradient; no lower bound on the weight (clip_low 1), only an upper one.
    "cispo": {
        "advantage_estimator": "grpo",
        "norm_by_std": True,
        "policy_loss": "cispo",
        "loss_agg_mode": "token-mean",
        "pg_clip_low": 1.0,
        "pg_clip_high": 0.28,
        "kl_mode": "none",
    },
}

DEFAULT_PRESET = "grpo"

DEMO_CONFIG: dict[str, Any] = {
    "rollout": {"prompts_per_step": 32, "group_size": 8, "max_new_tokens": 8, "temperature": 1.0},
    # lr 2e-4 worked for every seed tried; 1e-3 collapses the tiny policy, 5e-4 is seed-fragile.
    "algorithm": {"preset": "grpo", "kl_mode": "none"},
    "optim": {"lr": 2e-4},
    # One thread: on two shared cores, two OpenMP threads wait on each other (10-35x slower).
    "trainer": {"max_steps": 600, "micro_batch_size": 256, "save_every": 200, "samples_every": 50,
                "num_threads": 1},
    "eval": {"num_samples": 4, "batch_size": 500},
}
"""The run ``steadyrl train`` does with no config: the built-in reverse-a-string task."""

DEMO_TOOL_CONFIG: dict[str, Any] = {
    "demo": {"task": "tool", "num_train": 4000, "num_eval": 300, "tool_skill_steps": 500,
             "warmstart_steps": 30, "warmstart_lr": 1e-4, "tool_fraction": 0.3},
    "rollout": {"prompts_per_step": 16, "group_size": 8, "max_new_tokens": 16, "temperature": 1.0,
                "multi_turn": {"tools": ["steadyrl.demo.calculator:calculate"], "tool_parser": "hermes",
                               "max_turns": 2, "max_observation_tokens": 24, "max_episode_tokens": 48,
                               "tool_timeout_s": 5.0}},
    "algorithm": {"preset": "grpo", "kl_mode": "none"},
    "optim": {"lr": 5e-4},
    "trainer": {"max_steps": 60, "micro_batch_size": 128, "save_every": 0, "samples_every": 10,
                "num_threads": 1},
    "eval": {"num_samples": 0, "batch_size": 300},
}
"""The run ``steadyrl train demo.task=tool`` does with no config: multiplication with a calculator."""

DEMO_VISION_CONFIG: dict[str, Any] = {
    # a tiny Qwen2-VL (hidden 64) warm-started on a decoy colour table: it reads every square and
    # writes the format, and RL has to find the real table (docs/vision.md has the measured run)
    "demo": {"task": "vision", "num_train": 2000, "num_eval": 200, "hidden_size": 64, "n_heads": 2,
             "n_layers": 2, "max_images": 3, "warmstart_steps": 600, "warmstart_lr": 3e-3,
             "warmstart_batch_size": 32, "decoy_fraction": 0.5},
    "rollout": {"prompts_per_step": 16, "group_size": 8, "max_new_tokens": 6, "temperature": 1.0},
    "algorithm": {"preset": "grpo", "kl_mode": "none"},
    "optim": {"lr": 5e-4},  # 1e-3 learns faster (0% -> 69-100% in 100 steps) but the doctor sees grad spikes
    "trainer": {"max_steps": 150, "micro_batch_size": 128, "save_every": 0, "samples_every": 25,
                "num_threads": 1},
    "eval": {"num_samples": 0, "batch_size": 200},
}
"""The run ``steadyrl train demo.task=vision`` does with no config: a codeword read off coloured squares."""

DEMO_CONFIGS: dict[str, dict[str, Any]] = {"reverse": DEMO_CONFIG, "tool": DEMO_TOOL_CONFIG,
                                           "vision": DEMO_VISION_CONFIG}
"""The built-in config of each ``demo.task``."""


def apply_preset(raw: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Fill the unset keys of ``raw['algorithm']`` from its preset.

    Returns the new dict (``raw`` is not modified) and the dotted keys the preset filled.
    """
    algorithm = raw.get("algorithm") or {}
    if not isinstance(algorithm, dict):  # e.g. ``algorithm: ppo``; validation reports it
        return raw, set()
    name = algorithm.get("preset", DEFAULT_PRESET)
    preset = ALGORITHM_PRESETS.get(name) if isinstance(name, str) else None
    if preset is None:  # validation reports the bad name with the valid ones
        return raw, set()
    filled = {key: value for key, value in preset.items() if key not in algorithm}
    out = dict(raw)
    out["algorithm"] = {**filled, **algorithm}
    return out, {f"algorithm.{key}" for key in filled}
