"""``model.gguf_file``: ``steadyrl train`` takes a GGUF directly, converted once into a cached model
directory; a missing file, a file that is not GGUF and a GGUF that is not a causal LM exit 2 naming
the key. The tiny GGUFs are written with the ``gguf`` package's writer (tests/cli/test_convert.py);
the SmolLM2 run (marked slow) uses the real, cached Q4_1 file."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from steadyrl import cli

gguf = pytest.importorskip("gguf", reason="the gguf package is needed to write GGUF files: pip install gguf")
from cli.test_convert import write_encoder, write_tiny_llama  # noqa: E402

torch.set_num_threads(1)


def _config(tmp_path, model: dict, rows=None, steps: int = 1) -> str:
    rows = rows or [{"prompt": "ab", "answer": "c"}, {"prompt": "cd", "answer": "e"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"model": {"dtype": "float32", **model}, "data": {"train_path": str(tmp_path / "train.jsonl"),
                                                              "chat_template": False},
              "rewards": [{"name": "exact_match"}],
              "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
              "trainer": {"max_steps": steps, "save_every": 0, "samples_every": 0, "num_threads": 1},
              "eval": {"num_samples": 0}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_train_takes_a_gguf_converting_it_once_into_a_cached_directory(tmp_path, monkeypatch):
    import steadyrl.convert as convert

    monkeypatch.setenv("STEADYRL_CACHE", str(tmp_path / "cache"))
    calls = []
    real = convert.convert_gguf
    monkeypatch.setattr(convert, "convert_gguf", lambda *a, **k: calls.append(a) or real(*a, **k))
    write_tiny_llama(tmp_path / "tiny.gguf")
    cfg = _config(tmp_path, {"gguf_file": str(tmp_path / "tiny.gguf")})
    for run in ("run1", "run2"):
        assert cli.main(["train", cfg, "--output-dir", str(tmp_path / run)]) == 0
        steps = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        assert any(math.isfinite(m.get("actor/grad_norm", math.nan)) for m in steps)
    assert len(calls) == 1  # the second run loads the cached conversion
    cached = next((tmp_path / "cache" / "gguf").glob("tiny-*/config.json")).parent
    from transformers import AutoModelForCausalLM

    converted = AutoModelForCausalLM.from_pretrained(cached)
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32)
    ids = torch.tensor([[0, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(converted(ids).logits, reference(ids).logits, rtol=0, atol=0)


def test_a_gguf_file_name_is_read_inside_name_or_path(tmp_path, monkeypatch):
    from steadyrl.config import load_config
    from steadyrl.gguf_model import model_source

    monkeypatch.setenv("STEADYRL_CACHE", str(tmp_path / "cache"))
    write_tiny_llama(tmp_path / "tiny.gguf")
    config = load_config(_config(tmp_path, {"name_or_path": str(tmp_path), "gguf_file": "tiny.gguf"}), [])
    assert (tmp_path / "cache" / "gguf") in __import__("pathlib").Path(model_source(config)).parents


@pytest.mark.parametrize("make, needle", [
    (None, "no such file"),
    (lambda p: p.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}"), "is not a GGUF file"),
    (write_encoder, "general.architecture = 'bert'"),
    (lambda p: write_tiny_llama(p, with_weights=False), "holds no weights"),
])
def test_a_gguf_file_that_cannot_be_a_policy_exits_2_naming_the_key(tmp_path, monkeypatch, capsys, make, needle):
    monkeypatch.setenv("STEADYRL_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "model.gguf"
    if make is not None:
        make(path)
    cfg = _config(tmp_path, {"gguf_file": str(path)})
    assert cli.main(["train", cfg, "--output-dir", str(tmp_path / "run")]) == 2
    line = _error(capsys)
    assert line.count("model.gguf_file") >= 1 and needle in line, line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_gguf_file_with_the_demo_exits_2(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"model": {"gguf_file": str(tmp_path / "x.gguf")}}))
    assert cli.main(["train", str(tmp_path / "c.yaml"), "--output-dir", str(tmp_path / "run")]) == 2
    assert "model.gguf_file" in _error(capsys)


@pytest.mark.slow
def test_train_runs_grpo_on_the_smollm2_gguf_directly(tmp_path, monkeypatch):
    import support_smollm

    monkeypatch.setenv("STEADYRL_CACHE", str(tmp_path / "cache"))
    gguf_path = support_smollm.smollm2_gguf()
    rows = [{"prompt": [{"role": "user", "content": f"Which number is larger, {a} or {b}? "
                         "Reply in the form: The answer is N."}], "answer": str(max(a, b))}
            for a, b in [(3, 9), (41, 17)]]
    cfg = _config(tmp_path, {"gguf_file": str(gguf_path)}, rows)
    data = yaml.safe_load(open(cfg))
    data["data"]["chat_template"] = True
    data["rollout"]["max_new_tokens"] = 6
    open(cfg, "w").write(yaml.safe_dump(data))
    assert cli.main(["train", cfg, "--output-dir", str(tmp_path / "run")]) == 0
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(math.isfinite(m.get("actor/grad_norm", math.nan)) and m["response/length_mean"] > 0
               for m in steps if "actor/grad_norm" in m)
