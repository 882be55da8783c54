"""The example configs shipped in examples/ validate against the schema."""

from pathlib import Path

import pytest

from steadyrl.config import load_config

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_config_validates(path):
    config = load_config(str(path))
    assert config.model.name_or_path and (config.data.train_path or config.data.train_sources)
