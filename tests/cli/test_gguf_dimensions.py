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
    """The tiny one-layer Llama of test_convert.py, its metadata's dimensions overridden by ``stated``
    (``None``: not stated at all)."""
    dims = {"context_length": 64, "embedding_length": HIDDEN, "block_count": LAYERS, "feed_forward_length": FFN,
            "head_count": HEADS, "head_count_kv": HEADS, **stated}
    writer = _writer(path, "llama")
    for key, value in dims.items():
        if value is None:
            continue
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
    # a zero or missing width implied no weights at all, so 2^24 layers (or transformers' default width,
    # 4,096, in 32 layers: 6.7e9 weights from a 7 KB file) passed the checks and were built until memory ran out
    ({"embedding_length": 0, "block_count": 2 ** 24}, "llama.embedding_length = 0 is not a model width"),
    ({"embedding_length": None}, "states no llama.embedding_length"),
    ({"block_count": None}, "states no llama.block_count"),
    # a width of 1 implies few weights: 262,144 layers of modules passed (a layer is at least one tensor)
    ({"embedding_length": 1, "feed_forward_length": 1, "block_count": 2 ** 18},
     "llama.block_count = 262,144 layers, but the file holds 12 tensors"),
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


def write_mamba(path, **stated) -> None:
    """A tiny Mamba GGUF (transformers builds MambaForCausalLM from it), ``stated`` its ``mamba.ssm.*``
    metadata: ``ssm.inner_size`` is transformers' ``intermediate_size``, ``ssm.state_size``,
    ``ssm.time_step_rank`` and ``ssm.conv_kernel`` size its other matrices."""
    writer = _writer(path, "mamba")
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    for key, value in {"inner_size": 2 * HIDDEN, "state_size": 4, "time_step_rank": 1, "conv_kernel": 4,
                       **stated}.items():
        writer.add_uint64(f"mamba.ssm.{key}", value)
    _add_vocabulary(writer)
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (len(VOCAB), HIDDEN), "output_norm.weight": (HIDDEN,),
              "blk.0.ssm_in.weight": (4 * HIDDEN, HIDDEN), "blk.0.ssm_out.weight": (HIDDEN, 2 * HIDDEN)}
    for name, shape in shapes.items():
        writer.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    _finish(writer)


@pytest.mark.parametrize("stated, said", [
    ({"inner_size": 2 ** 40}, "mamba.ssm.inner_size = 1,099,511,627,776 is not a model dimension"),
    ({"state_size": 2 ** 33}, "mamba.ssm.state_size = 8,589,934,592 is not a model dimension"),
    ({"time_step_rank": 2 ** 33}, "mamba.ssm.time_step_rank = 8,589,934,592"),
    ({"conv_kernel": 2 ** 33}, "mamba.ssm.conv_kernel = 8,589,934,592"),
    ({"inner_size": 2 ** 20}, "implies at least"),  # within the bound, not within the file
    ({"state_size": 2 ** 16}, "implies at least"),
])
def test_a_mambas_ssm_dimensions_are_bounded_too(tmp_path, never_built, stated, said):
    path = tmp_path / "mamba.gguf"
    write_mamba(path, **stated)
    assert path.stat().st_size < 20_000
    with pytest.raises(ModelLoadError, match="refused before the model is allocated") as err:
        convert.convert_gguf(path, tmp_path / "out")
    assert said in str(err.value)


def test_the_dimensions_of_a_real_mamba_shape_pass(tmp_path):
    path = tmp_path / "mamba.gguf"
    write_mamba(path)
    convert.check_dimensions(convert.read_gguf(path))


def write_moe(path, experts: int, expert_ff: int | None = None) -> None:
    """A tiny Qwen3-MoE GGUF (one layer, the weights of a dense one) stating ``experts`` experts:
    transformers builds each of them, ``3 x embedding x moe_intermediate_size`` weights apiece (its
    default 768 wide: it reads no expert width from a qwen3moe file, so a stated 1 is no bound)."""
    writer = _writer(path, "qwen3moe")
    for key, value in {"context_length": 64, "embedding_length": HIDDEN, "block_count": LAYERS,
                       "feed_forward_length": FFN, "attention.head_count": HEADS, "attention.head_count_kv": HEADS,
                       "expert_count": experts, "expert_used_count": 1,
                       **({"expert_feed_forward_length": expert_ff} if expert_ff else {})}.items():
        writer.add_uint32(f"qwen3moe.{key}", value)
    _add_vocabulary(writer)
    rng = np.random.default_rng(0)
    for name, shape in {"token_embd.weight": (len(VOCAB), HIDDEN), "output_norm.weight": (HIDDEN,),
                        "blk.0.ffn_up_exps.weight": (1, FFN, HIDDEN)}.items():
        writer.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    _finish(writer)


@pytest.mark.parametrize("experts, expert_ff", [(2 ** 20, None), (2 ** 16, 1024), (2 ** 17, 1)])
def test_the_experts_a_moe_states_count_in_the_weights_it_implies(tmp_path, never_built, experts, expert_ff):
    path = tmp_path / "moe.gguf"
    write_moe(path, experts, expert_ff)
    with pytest.raises(ModelLoadError, match="implies at least") as err:
        convert.convert_gguf(path, tmp_path / "out")
    assert f"qwen3moe.expert_count = {experts:,}" in str(err.value)


def test_a_real_moe_shape_passes(tmp_path):
    path = tmp_path / "moe.gguf"
    write_moe(path, 4, FFN)
    convert.check_dimensions(convert.read_gguf(path))


def test_tensors_whose_shapes_differ_from_the_stated_dimensions_exit_2_with_one_error_line(tmp_path, capsys):
    """``llama.feed_forward_length`` twice its tensors' width: transformers builds the stated model and
    refuses the file's tensors; at d175cfe its RuntimeError came out as a traceback (no exit 2).
    (transformers' progress bars come before the error line.)"""
    path = tmp_path / "mismatched.gguf"
    write_llama(path, feed_forward_length=2 * FFN)
    assert cli.main(["convert", str(path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("steadyrl: error: ")]
    assert len(errors) == 1 and errors[0] == err[-1] and "Traceback" not in "\n".join(err), err
    assert "mismatched.gguf" in errors[0] and "do not match" in errors[0], err
    assert f"llama.feed_forward_length = {2 * FFN}" in errors[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("write", [write_llama, write_mamba], ids=["llama", "mamba"])
def test_a_conversion_that_parses_once_writes_the_bytes_one_that_parses_per_reader_writes(tmp_path, monkeypatch, write):
    """The shared reader and name map of ``_parsed_once`` (420c2db) change no byte of the output
    (the tiny Mamba lacks tensors transformers then initialises: the seed is fixed for both)."""
    import contextlib

    import torch

    write(tmp_path / "m.gguf")
    torch.manual_seed(0)
    convert.convert_gguf(tmp_path / "m.gguf", tmp_path / "once")
    monkeypatch.setattr(convert, "_parsed_once", contextlib.nullcontext)
    torch.manual_seed(0)
    convert.convert_gguf(tmp_path / "m.gguf", tmp_path / "per-reader")
    once = {p.name: p.read_bytes() for p in (tmp_path / "once").iterdir()}
    assert "model.safetensors" in once
    assert once == {p.name: p.read_bytes() for p in (tmp_path / "per-reader").iterdir()}
