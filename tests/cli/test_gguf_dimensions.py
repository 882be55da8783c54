"""A GGUF's model dimensions are bounded before transformers builds the model from them: a tiny
file whose metadata says ``llama.embedding_length = 2^40`` (or a thousand times more layers than
its tensors hold) is exit 2 naming the key, never an allocation of terabytes."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from steadyrl import cli

gguf = pytest.importorskip("gguf", reason="the gguf package is needed to write GGUF files: pip install gguf")
from cli.test_convert import FFN, HEADS, HIDDEN, LAYERS, VOCAB, _add_vocabulary, _finish, _writer  # noqa: E402

import steadyrl.convert as convert  # noqa: E402
from steadyrl.errors import ModelLoadError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def write_llama(path, **stated) -> None:
    """The tiny one-layer Llama of test_convert.py, its metadata's dimensions overridden by ``stated``."""
    dims = {"context_length": 64, "embedding_length": HIDDEN, "block_count": LAYERS, "feed_forward_length": FFN,
            "head_count": HEADS, "head_count_kv": HEADS, **stated}
    writer = _writer(path, "llama")
    for key, value in dims.items():
        if value < 2 ** 32:
            getattr(writer, f"add_{key}")(value)
        else:  # a uint64 value: GGUF allows any integer type, and transformers reads it
            writer.add_uint64(f"llama.{'attention.' if key.startswith('head_') else ''}{key}", value)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    _add_vocabulary(writer)
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (len(VOCAB), HIDDEN), "output_norm.weight": (HIDDEN,),
              "output.weight": (len(VOCAB), HIDDEN), "blk.0.attn_norm.weight": (HIDDEN,),
              "blk.0.ffn_norm.weight": (HIDDEN,), "blk.0.attn_q.weight": (HIDDEN, HIDDEN),
              "blk.0.attn_k.weight": (HIDDEN, HIDDEN), "blk.0.attn_v.weight": (HIDDEN, HIDDEN),
              "blk.0.attn_output.weight": (HIDDEN, HIDDEN), "blk.0.ffn_gate.weight": (FFN, HIDDEN),
              "blk.0.ffn_up.weight": (FFN, HIDDEN), "blk.0.ffn_down.weight": (HIDDEN, FFN)}
    for name, shape in shapes.items():
        writer.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    _finish(writer)


@pytest.fixture
def never_built(monkeypatch):
    monkeypatch.setattr(convert, "load_gguf", lambda *a, **k: pytest.fail("transformers was asked to build it"))


@pytest.mark.parametrize("stated, said", [
    ({"embedding_length": 2 ** 40}, "llama.embedding_length = 1,099,511,627,776 is not a model dimension"),
    ({"context_length": 2 ** 31}, "llama.context_length = 2,147,483,648 is not a model dimension"),
    ({"head_count": 2 ** 32 - 1}, "llama.attention.head_count = 4,294,967,295"),
    ({"embedding_length": 65_536}, "llama.embedding_length = 65,536"),  # within the bound, not within the file
    ({"block_count": 100_000}, "llama.block_count = 100,000"),
    ({"feed_forward_length": 10_000_000}, "implies at least"),
])
def test_absurd_dimensions_are_refused_naming_the_key_before_the_model_is_built(tmp_path, never_built, stated, said):
    path = tmp_path / "big.gguf"
    write_llama(path, **stated)
    assert path.stat().st_size < 20_000
    with pytest.raises(ModelLoadError, match="refused before the model is allocated") as err:
        convert.convert_gguf(path, tmp_path / "out")
    assert said in str(err.value) and str(path) in str(err.value)
    assert not (tmp_path / "out").exists()


def test_the_dimensions_of_a_real_shape_pass(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_llama(path)
    info = convert.read_gguf(path)
    assert info.dimensions["llama.embedding_length"] == HIDDEN and info.dimensions["llama.vocab_size"] == len(VOCAB)
    convert.check_dimensions(info)


def _limited():  # a bounded address space: an allocation of the stated model fails instead of taking the machine
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_steadyrl_convert_exits_2_in_one_line_under_a_memory_limit(tmp_path):
    path = tmp_path / "big.gguf"
    write_llama(path, embedding_length=2 ** 40)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "steadyrl", "convert", str(path), str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=120, preexec_fn=_limited)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "llama.embedding_length = 1,099,511,627,776" in lines[0], lines


def test_the_gguf_file_preflight_refuses_absurd_dimensions_naming_the_setting(tmp_path, capsys, never_built):
    path = tmp_path / "model.gguf"
    write_llama(path, embedding_length=2 ** 40)
    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "ab", "answer": "c"}) + "\n")
    config = {"model": {"gguf_file": str(path)}, "data": {"train_path": str(tmp_path / "train.jsonl")},
              "rewards": [{"name": "exact_match"}]}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    assert cli.main(["train", str(tmp_path / "cfg.yaml"), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.gguf_file" in err[0] and "llama.embedding_length" in err[0], err
