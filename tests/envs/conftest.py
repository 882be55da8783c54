"""Fixtures of the adapter tests: the CLI tests' ``steadyrl_cli`` (a fresh ``python -m steadyrl``
process, offline, one thread) and a tiny chat model saved to disk (no download)."""

import pytest
from cli.conftest import steadyrl_cli  # noqa: F401


@pytest.fixture(scope="session")
def chat_model(tmp_path_factory):
    from agents.templates import QWEN25, chat_tokenizer
    from steadyrl.demo.model import build_tiny_model

    root = tmp_path_factory.mktemp("envs_model")
    tokenizer = chat_tokenizer(QWEN25, bos="<|begin_of_text|>")
    model = build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, seed=0, max_positions=4096)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    return root / "model"


