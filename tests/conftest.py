"""Test-wide settings and fixtures.

* One torch thread (two threads on tiny models make timings erratic), the hub offline, and a
  derandomized hypothesis profile without deadlines (CI machines are slow and noisy).
* ``tests/`` on ``sys.path``, so any test imports the shared helpers as ``import support``.
* Session fixtures: a tiny model saved to disk and a character tokenizer.
* The test runner's own pipes (a pytest-xdist worker's channel) are not the tests' to replace or
  close (``support_runner_fds``).
"""

import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support_runner_fds import pytest_sessionfinish, pytest_sessionstart  # noqa: E402,F401 - hooks
torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the runs tests start record their configs as the user's own (steadyrl.run.trust): here, not in ~/.local/state
os.environ.setdefault("STEADYRL_TRUST_DIR", tempfile.mkdtemp(prefix="steadyrl-trust-"))

settings.register_profile(
    "steadyrl",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.load_profile("steadyrl")

try:  # transformers' "Loading weights" bars drown test output
    from transformers.utils import logging as _hf_logging

    _hf_logging.disable_progress_bar()
except ImportError:  # pragma: no cover
    pass


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny causal LM and its tokenizer in a local directory, built once per session."""
    import support

    return support.build_tiny_lm(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def char_tokenizer():
    """A character-level tokenizer over printable ASCII, built in memory."""
    import support

    return support.char_tokenizer()
