"""Test-wide settings: one torch thread (two threads on tiny models make timings erratic) and a
hypothesis profile without deadlines (CI machines are slow and noisy)."""

import os

import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

settings.register_profile(
    "steadyrl",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.load_profile("steadyrl")
