"""Where the trained model is (issue 24): ``train`` writes the final policy as a plain Hugging Face
directory ``RUN/final`` and names it in its ``done:`` line; ``steadyrl export`` writes any
checkpoint the same way. A LoRA run's ``final/`` holds merged weights and keeps the adapter."""

from __future__ import annotations

import json

import pytest
import torch

torch.set_num_threads(1)


def _run(tiny_run, tmp_path_factory, steadyrl_cli, name, *overrides):
    out = tmp_path_factory.mktemp(name) / "run"
    proc = steadyrl_cli("train", str(tiny_run.config), "--output-dir", str(out), "trainer.max_steps=1",
                        "eval.num_samples=1", *overrides, cwd=tiny_run.root)
    assert proc.returncode == 0, proc.stderr
    return out, proc


@pytest.fixture(scope="module")
def full_run(tiny_run, tmp_path_factory, steadyrl_cli):
    return _run(tiny_run, tmp_path_factory, steadyrl_cli, "full")


@pytest.fixture(scope="module")
def lora_run(tiny_run, tmp_path_factory, steadyrl_cli):
    pytest.importorskip("peft")
    return _run(tiny_run, tmp_path_factory, steadyrl_cli, "lora", "model.lora.enabled=true", "model.lora.r=4",
                "optim.lr=0.01")


def _weights(directory):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).state_dict()


def test_final_model_loads_with_transformers_and_generates(full_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, proc = full_run
    final = out / "final"
    done = [line for line in proc.stdout.splitlines() if line.startswith("done:")]
    assert done and f"final model {final}" in done[0], proc.stdout
    assert json.loads((out / "summary.json").read_text())["final_model"] == str(final)
    assert (final / "generation_config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(final)
    tokenizer = AutoTokenizer.from_pretrained(final)
    ids = tokenizer("12+3=", return_tensors="pt")
    generated = model.generate(**ids, max_new_tokens=3, do_sample=False)
    assert generated.shape[1] > ids["input_ids"].shape[1]


def test_export_of_the_last_checkpoint_equals_the_final_model(full_run, tmp_path, steadyrl_cli):
    out, _ = full_run
    proc = steadyrl_cli("export", str(out), str(tmp_path / "exported"))
    assert proc.returncode == 0, proc.stderr
    exported, final = _weights(tmp_path / "exported"), _weights(out / "final")
    assert exported.keys() == final.keys()
    for name, tensor in final.items():
        assert torch.equal(exported[name], tensor), name
    assert (tmp_path / "exported" / "tokenizer_config.json").is_file()


def test_export_of_a_missing_step_names_the_steps_there(full_run, tmp_path, steadyrl_cli):
    out, _ = full_run
    proc = steadyrl_cli("export", str(out), str(tmp_path / "x"), "--step", "7")
    assert proc.returncode == 2
    assert "--step 7" in proc.stderr and "step(s) 1" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_export_of_a_folder_that_is_not_a_run_is_refused(tmp_path, steadyrl_cli):
    proc = steadyrl_cli("export", str(tmp_path), str(tmp_path / "x"))
    assert proc.returncode == 2 and "no config.yaml" in proc.stderr


def test_lora_final_model_is_the_merged_adapter_and_keeps_the_adapter(lora_run, tiny_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out, _ = lora_run
    final = out / "final"
    assert not (final / "adapter_config.json").exists()  # plain weights: no PEFT needed to load it
    assert (final / "adapter" / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_run.model, dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, str(final / "adapter")).eval()
    ids = torch.tensor([[1, 5, 7, 9, 11]])
    with torch.no_grad():
        want, got = adapted(input_ids=ids).logits, merged(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_lora_export_without_merge_writes_the_adapter_alone(lora_run, tmp_path, steadyrl_cli):
    out, _ = lora_run
    proc = steadyrl_cli("export", str(out), str(tmp_path / "adapter"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert not (tmp_path / "adapter" / "model.safetensors").exists()


def test_a_final_model_that_cannot_be_written_leaves_the_run_complete_and_says_how_to_retry(tmp_path, capsys):
    from types import SimpleNamespace

    from steadyrl.run.export import write_final

    pytest.importorskip("peft")
    policy = tmp_path / "checkpoints" / "step_000001" / "policy"
    policy.mkdir(parents=True)
    (policy / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))  # names no base model
    config = SimpleNamespace(model=SimpleNamespace(name_or_path=None, revision=None, trust_remote_code=False))
    assert write_final(config, tmp_path) is None
    out = capsys.readouterr().out
    assert "could not write" in out and f"steadyrl export {tmp_path} OUT --merge-lora" in out
    assert not (tmp_path / "final").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]  # nothing half-written
