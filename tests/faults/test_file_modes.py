"""Weight files are readable like the files beside them (issue 33, item 10): safetensors writes
0600 whatever the umask, so checkpoints, final/ and exports had model.safetensors 0600 next to a
0644 config.json."""

import os

from steadyrl.model_files import share_like_the_config


def _mode(path) -> int:
    return os.stat(path).st_mode & 0o777


def test_a_saved_checkpoint_model_has_the_mode_of_its_config(tmp_path):
    from steadyrl.demo.model import build_tiny_model
    from steadyrl.demo.tokenizer import build_char_tokenizer
    from steadyrl.run.checkpoint import _save_model

    model = build_tiny_model(build_char_tokenizer("abc"), n_layers=1, hidden_size=32, n_heads=2, seed=0)
    _save_model(model, tmp_path / "policy")
    assert _mode(tmp_path / "policy" / "model.safetensors") == _mode(tmp_path / "policy" / "config.json")
    assert _mode(tmp_path / "policy" / "model.safetensors") & 0o044  # readable beyond its owner (umask 022)


def test_old_0600_weights_get_the_mode_of_the_config_beside_them_or_above(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    os.chmod(tmp_path / "config.json", 0o640)
    (tmp_path / "model.safetensors").write_bytes(b"x")
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_model.safetensors").write_bytes(b"x")
    for f in (tmp_path / "model.safetensors", tmp_path / "adapter" / "adapter_model.safetensors"):
        os.chmod(f, 0o600)
    share_like_the_config(tmp_path)
    assert _mode(tmp_path / "model.safetensors") == 0o640
    assert _mode(tmp_path / "adapter" / "adapter_model.safetensors") == 0o640  # the directory's config
