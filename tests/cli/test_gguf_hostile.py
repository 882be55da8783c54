"""A hostile GGUF header is exit 2 with a clear message, never an unbounded allocation or a
traceback (issue 30, item 9): every size the header states is bounded by the file's size, arrays
nest at most ``MAX_DEPTH`` deep, and text must be UTF-8 - for ``steadyrl convert`` and for the
``model.gguf_file`` pre-flight. The files are crafted byte by byte (a 99-byte one claims an array
of 2^40 items)."""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from steadyrl import cli
from steadyrl.gguf_header import MAX_DEPTH

pytest.importorskip("gguf", reason="the gguf package reads GGUF files: pip install gguf")
REPO = Path(__file__).resolve().parents[2]


def _text(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _head(n_kv: int, n_tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def huge_array() -> bytes:
    data = _head(1) + _text(b"general.architecture") + struct.pack("<IIQ", 9, 0, 2 ** 40)
    return data + b"\0" * (99 - len(data))


def deep_array(depth: int = 5000) -> bytes:
    return _head(1) + _text(b"x") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * depth + struct.pack("<IQ", 0, 0)


def bad_architecture() -> bytes:
    return _head(1) + _text(b"general.architecture") + struct.pack("<I", 8) + _text(b"\xff\xfellama")


def long_string() -> bytes:
    return _head(1) + _text(b"general.architecture") + struct.pack("<IQ", 8, 2 ** 62) + b"llama"


def string_in_array() -> bytes:  # a vocabulary whose second token claims 2^40 bytes
    return (_head(1) + _text(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + _text(b"a")
            + struct.pack("<Q", 2 ** 40) + b"b" * 16)


def many_tensors() -> bytes:
    return _head(1, n_tensors=2 ** 50) + _text(b"general.architecture") + struct.pack("<I", 8) + _text(b"llama")


def huge_tensor() -> bytes:
    return (_head(1, n_tensors=1) + _text(b"general.architecture") + struct.pack("<I", 8) + _text(b"llama")
            + _text(b"w") + struct.pack("<I", 2) + struct.pack("<QQ", 2 ** 40, 2 ** 40) + struct.pack("<IQ", 0, 0))


CASES = {
    "huge_array": (huge_array, "claims 1,099,511,627,776 items"),
    "deep_array": (deep_array, f"nests arrays more than {MAX_DEPTH} deep"),
    "bad_architecture": (bad_architecture, "is not UTF-8 text"),
    "long_string": (long_string, "claims 4,611,686,018,427,387,904 bytes"),
    "many_tensors": (many_tensors, "the tensor list"),
    "string_in_array": (string_in_array, "claims 1,099,511,627,776 bytes"),
    "huge_tensor": (huge_tensor, "more than a"),
}


def _limited():  # a bounded address space: an unbounded allocation fails instead of taking the machine
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.mark.parametrize("name", sorted(CASES))
def test_convert_refuses_a_hostile_header_with_exit_2(tmp_path, name):
    build, said = CASES[name]
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(build())
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "steadyrl", "convert", str(path), str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=120, preexec_fn=_limited)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and said in lines[0], lines
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_the_99_byte_file_is_99_bytes():
    assert len(huge_array()) == 99


@pytest.mark.parametrize("name", ["huge_array", "deep_array", "bad_architecture"])
def test_the_gguf_file_preflight_refuses_a_hostile_header_naming_the_key(tmp_path, capsys, name):
    build, said = CASES[name]
    path = tmp_path / "model.gguf"
    path.write_bytes(build())
    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "ab", "answer": "c"}) + "\n")
    config = {"model": {"gguf_file": str(path)}, "data": {"train_path": str(tmp_path / "train.jsonl")},
              "rewards": [{"name": "exact_match"}]}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    assert cli.main(["train", str(tmp_path / "cfg.yaml"), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.gguf_file" in err[0] and said in err[0], err
