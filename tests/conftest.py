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


def build_tiny_lm(directory, *, n_layers: int = 1, hidden_size: int = 32, n_heads: int = 2, seed: int = 0):
    """A tiny Llama over the demo's character tokenizer, saved with ``save_pretrained`` (no download)."""
    from steadyrl.demo.model import build_tiny_model
    from steadyrl.demo.task import VOCAB_CHARS
    from steadyrl.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(VOCAB_CHARS)
    model = build_tiny_model(tokenizer, n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads, seed=seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny causal LM and its tokenizer in a local directory, built once per session."""
    return build_tiny_lm(tmp_path_factory.mktemp("tiny_model"))

try:  # transformers' "Loading weights" bars drown test output
    from transformers.utils import logging as _hf_logging

    _hf_logging.disable_progress_bar()
except ImportError:  # pragma: no cover
    pass
