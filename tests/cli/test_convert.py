"""``steadyrl convert GGUF OUT_DIR``: a GGUF file becomes a model directory that ``steadyrl train``
loads; every bad input (a missing file, a file that is not GGUF, a GGUF that is not a causal LM,
a GGUF without weights, an OUT_DIR in use) exits 2 with one line naming the file.

The files are written here with the ``gguf`` package's own writer (no download): a tiny Llama
with a byte-level vocabulary converts end to end; the SmolLM2 test (test_smollm2.py) does the same
with a real model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from steadyrl import cli

gguf = pytest.importorskip("gguf", reason="the gguf package is needed to write GGUF files: pip install gguf")

VOCAB = ["<s>", "</s>", *"abcdefghijklmnopqrstuvwxyz ", "<|end|>"]
HIDDEN, FFN, HEADS, LAYERS = 8, 16, 2, 1
TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}<|end|>{% endfor %}"


def _writer(path, arch: str):
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("tiny")
    return writer


def _finish(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _add_vocabulary(writer) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(VOCAB)
    writer.add_token_types([3, 3, *([1] * 27), 3])
    writer.add_token_scores([0.0] * len(VOCAB))
    writer.add_token_merges([])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_eot_token_id(len(VOCAB) - 1)
    writer.add_chat_template(TEMPLATE)


def write_tiny_llama(path, *, with_weights: bool = True) -> None:
    """A one-layer Llama in float32 with llama.cpp's tensor names; ``with_weights=False`` gives a
    vocabulary-only file (as llama.cpp ships for its tokenizer tests)."""
    writer = _writer(path, "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(VOCAB))
    _add_vocabulary(writer)
    if with_weights:
        rng = np.random.default_rng(0)
        shapes = {"token_embd.weight": (len(VOCAB), HIDDEN), "output_norm.weight": (HIDDEN,),
                  "output.weight": (len(VOCAB), HIDDEN)}
        for name, shape in {"attn_norm": (HIDDEN,), "ffn_norm": (HIDDEN,), "attn_q": (HIDDEN, HIDDEN),
                            "attn_k": (HIDDEN, HIDDEN), "attn_v": (HIDDEN, HIDDEN),
                            "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (FFN, HIDDEN),
                            "ffn_up": (FFN, HIDDEN), "ffn_down": (HIDDEN, FFN)}.items():
            shapes[f"blk.0.{name}.weight"] = shape
        for name, shape in shapes.items():
            writer.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    _finish(writer)


def write_encoder(path) -> None:
    """A GGUF whose architecture is an encoder (BERT): a model, but not a causal LM."""
    writer = _writer(path, "bert")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, HIDDEN), np.float32))
    _finish(writer)


def _error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steadyrl: error: "), lines
    return lines[0]


def test_a_tiny_llama_gguf_converts_into_a_directory_that_loads_with_its_template_and_ends(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    write_tiny_llama(tmp_path / "tiny.gguf")
    assert cli.main(["convert", str(tmp_path / "tiny.gguf"), str(tmp_path / "out")]) == 0
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    generation = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [1, len(VOCAB) - 1]  # eos and the eot token, both ends
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.chat_template == TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32)
    ids = torch.tensor([[0, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=0)


def test_a_conversion_parses_the_gguf_once_and_leaves_gguf_as_it_was(tmp_path, monkeypatch):
    """Four parses (the metadata, then transformers' config, tokenizer and weights) took half of
    SmolLM2-135M's 25 s conversion; one reader is shared now, and gguf's own names are restored."""
    import gguf

    from steadyrl.convert import convert_gguf

    made = []
    real = gguf.GGUFReader

    class Counted(real):
        def __init__(self, *args, **kwargs):
            made.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", Counted)
    names = gguf.get_tensor_name_map
    write_tiny_llama(tmp_path / "tiny.gguf")
    convert_gguf(tmp_path / "tiny.gguf", tmp_path / "out")
    assert len(made) == 1, made
    assert gguf.GGUFReader is Counted and gguf.get_tensor_name_map is names
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_convert_refuses_a_missing_file(tmp_path, capsys):
    assert cli.main(["convert", str(tmp_path / "nope.gguf"), str(tmp_path / "out")]) == 2
    line = _error(capsys)
    assert "nope.gguf" in line and "no such file" in line
    assert not (tmp_path / "out").exists()


def test_convert_refuses_a_file_that_is_not_gguf(tmp_path, capsys):
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    assert cli.main(["convert", str(tmp_path / "model.safetensors"), str(tmp_path / "out")]) == 2
    line = _error(capsys)
    assert "model.safetensors" in line and "is not a GGUF file" in line and "model.name_or_path" in line


def test_convert_refuses_a_gguf_that_is_not_a_causal_lm(tmp_path, capsys):
    write_encoder(tmp_path / "encoder.gguf")
    assert cli.main(["convert", str(tmp_path / "encoder.gguf"), str(tmp_path / "out")]) == 2
    line = _error(capsys)
    assert "encoder.gguf" in line and "general.architecture = 'bert'" in line and "llama" in line


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen2moe", "qwen3moe", "gpt-oss", "phi3", "gemma2"])
def test_llama_cpp_names_of_causal_lms_pass_the_architecture_check(arch, tmp_path):
    from steadyrl.convert import GGUFInfo, check_causal_lm

    check_causal_lm(GGUFInfo(path=tmp_path / "m.gguf", architecture=arch, name=None, n_tensors=3, bos_token_id=None,
                             dimensions={f"{arch}.embedding_length": 8, f"{arch}.block_count": 1}))


def test_convert_refuses_a_vocabulary_only_gguf(tmp_path, capsys):
    write_tiny_llama(tmp_path / "vocab.gguf", with_weights=False)
    assert cli.main(["convert", str(tmp_path / "vocab.gguf"), str(tmp_path / "out")]) == 2
    line = _error(capsys)
    assert "vocab.gguf" in line and "holds no weights" in line


def test_convert_refuses_a_non_empty_out_dir_before_converting_and_replaces_it_with_overwrite(tmp_path, capsys):
    write_tiny_llama(tmp_path / "tiny.gguf")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    assert cli.main(["convert", str(tmp_path / "tiny.gguf"), str(tmp_path / "out")]) == 2
    line = _error(capsys)
    assert "OUT_DIR" in line and "--overwrite" in line
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"
    assert cli.main(["convert", str(tmp_path / "tiny.gguf"), str(tmp_path / "out"), "--overwrite"]) == 0
    assert not (tmp_path / "out" / "notes.txt").exists() and (tmp_path / "out" / "model.safetensors").is_file()


def test_convert_refuses_a_directory_given_as_the_gguf(tmp_path, capsys):
    assert cli.main(["convert", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "is a directory" in _error(capsys)


def test_convert_without_accelerate_names_the_extra_before_loading(tmp_path, capsys, monkeypatch):
    """A fresh `pip install -e ".[gguf]"` lacked accelerate and convert failed after 28 s inside transformers."""
    path = tmp_path / "tiny.gguf"
    write_tiny_llama(path)
    monkeypatch.setitem(__import__("sys").modules, "accelerate", None)  # not installed
    assert cli.main(["convert", str(path), str(tmp_path / "out")]) == 2
    error = _error(capsys)
    assert "accelerate" in error and "steadyrl[gguf]" in error
    assert not (tmp_path / "out").exists()


def test_two_conversions_at_once_leave_gguf_as_it_was(tmp_path):
    """Two threads in ``_parsed_once`` at the same time: at d175cfe the second saved the first's
    caching reader as gguf's own and put it back last, so every later ``GGUFReader(path)`` of the
    process returned the reader of the file once at that path (its old contents) and kept it mapped."""
    import threading

    import gguf

    from steadyrl import convert

    real = gguf.GGUFReader, gguf.get_tensor_name_map
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with convert._parsed_once():
            first_in.set()
            second_in.wait(1.0)  # the second enters now, or (one at a time) after this one leaves
        first_out.set()

    def second():
        first_in.wait(10)
        with convert._parsed_once():
            second_in.set()
            first_out.wait(10)  # the second leaves last

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    left = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader, gguf.get_tensor_name_map = real  # the other tests of this process get gguf's own
    assert second_in.is_set()
    assert left == real
