"""A safetensors index's ``weight_map`` names shards beside it, never a path: ``..`` or an absolute
name would make a model check or a checkpoint resume read any ``*.safetensors`` on the machine."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from steadyrl.errors import ConfigError, ModelLoadError
from steadyrl.model_files import check_weight_files, shard_names
from steadyrl.run.checkpoint import read_model_weights

torch.set_num_threads(1)


def _model_dir(tmp_path, shard: str):
    """A directory holding one good shard and an index naming ``shard``; a good shard outside it too."""
    outside = tmp_path / "outside.safetensors"
    save_file({"secret": torch.ones(2)}, str(outside))
    directory = tmp_path / "model"
    directory.mkdir()
    save_file({"w": torch.zeros(2)}, str(directory / "model-00001-of-00001.safetensors"))
    shard = shard.replace("OUTSIDE", str(outside))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        "w": "model-00001-of-00001.safetensors", "secret": shard}}))
    return directory


HOSTILE = ["../outside.safetensors", "OUTSIDE", "sub/../../outside.safetensors", "..", "model.bin",
           "a\\..\\outside.safetensors"]


@pytest.mark.parametrize("shard", HOSTILE)
def test_a_weight_map_name_that_is_a_path_is_refused_by_the_model_check(tmp_path, shard):
    directory = _model_dir(tmp_path, shard)
    with pytest.raises(ModelLoadError, match=r"model.name_or_path: .*weight_map names the shard .*a plain"):
        check_weight_files("model.name_or_path", directory)


@pytest.mark.parametrize("shard", HOSTILE)
def test_a_checkpoint_index_naming_a_file_outside_it_is_refused_not_loaded(tmp_path, shard):
    directory = _model_dir(tmp_path, shard)
    with pytest.raises(ConfigError, match=r"checkpoint .*weight_map names the shard .*resume from another"):
        read_model_weights(directory)


def test_plain_shard_names_are_read(tmp_path):
    directory = _model_dir(tmp_path, "model-00001-of-00001.safetensors")
    assert shard_names(directory / "model.safetensors.index.json") == ["model-00001-of-00001.safetensors"]
    check_weight_files("model.name_or_path", directory)
    assert list(read_model_weights(directory)) == ["w"]


def test_an_index_that_is_not_a_mapping_is_named(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    for text in ("[]", '{"weight_map": ["a"]}', '{"weight_map": {"w": 3}}', "{"):
        index.write_text(text)
        with pytest.raises(ValueError, match="model.safetensors.index.json"):
            shard_names(index)
