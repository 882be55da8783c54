"""steadyrl: numerically stable RL post-training (PPO, GRPO and relatives) for causal language models."""

__version__ = "0.1.0"
