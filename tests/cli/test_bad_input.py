"""The table of bad input: every mistake a user can make in a config, a data file, a reward spec
or a model name ends ``steadyrl`` with exit status 2 and exactly one line on stderr,
``steadyrl: error: ...``, naming the field or file, with no traceback — and, for every input
that can be checked without the model, before any model weights are loaded.

The table runs in-process (``steadyrl.cli.main``) for speed, with model loading replaced by a
recorder; three rows also run as real ``python -m steadyrl`` processes, end to end.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import pytest
import torch
import transformers

from steadyrl import cli


@dataclass(frozen=True)
class Case:
    """One row: the arguments after ``train CONFIG --output-dir OUT`` (``{root}`` is the fixture
    folder), the words the error line must contain, and whether it must come before the model."""

    args: tuple[str, ...]
    names: tuple[str, ...]
    before_model: bool = True
    command: tuple[str, ...] = ("train", "{config}", "--output-dir", "{out}")
    marks: tuple = field(default=())






def _demo_ready() -> bool:
    import steadyrl.demo

    return hasattr(steadyrl.demo, "make_splits")


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


CASES = {
    # --- configuration -------------------------------------------------------------------------
    "unknown config key": Case(("trainer.lr=1e-5",), ("'trainer.lr'", "'optim.lr'")),
    "unknown nested key": Case(("model.lora.rank=8",), ("'model.lora.rank'", "'model.lora.r'")),
    "unknown key in a reward": Case(("rewards=[{name: math, wieght: 2}]",), ("rewards[0].wieght", "weight")),
    "wrong type": Case(("rollout.group_size=four",), ("rollout.group_size", "'four'", "integer")),
    "out-of-range value": Case(("algorithm.lam=1.5",), ("algorithm.lam", "1.5", "less than or equal to 1")),
    "unknown preset": Case(("algorithm.preset=grpo2",), ("algorithm.preset", "'grpo2'", "'dr_grpo'")),
    "unknown tracker": Case(("trainer.trackers=[tensorbaord]",), ("trainer.trackers[0]", "'tensorbaord'",
                                                                    "'tensorboard'")),
    "a section given a scalar": Case(("algorithm=ppo",), ("algorithm", "algorithm.preset=ppo")),
    "optimizer betas out of range": Case(("optim.betas=[1.5, 0.999]",), ("optim.betas[0]", "1.5", "less than 1")),
    "argument that is neither a file nor key=value": Case(("trainer.max_steps",), ("'trainer.max_steps'", "key=value")),
    "integer longer than Python reads (4,300 digits)": Case((f"rollout.max_new_tokens={'9' * 5000}",),
                                                           ("rollout.max_new_tokens", "5000 digits")),
    "integer of 5,000 digits in the config file": Case(
        (), ("big_int.yaml", "line 2", "5000 digits"), command=("train", "{root}/big_int.yaml", "--output-dir", "{out}")),
    "absurd max_new_tokens": Case(("rollout.max_new_tokens=1000000000000",), ("rollout.max_new_tokens", "1000000000000")),
    "absurd eval max_new_tokens": Case(("eval.max_new_tokens=1000000000000",), ("eval.max_new_tokens", "1000000000000")),
    "absurd prompts per step": Case(("rollout.prompts_per_step=1000000000000",),
                                    ("rollout.prompts_per_step", "1000000000000")),
    "absurd group size": Case(("rollout.group_size=1000000000000",), ("rollout.group_size", "1000000000000")),
    "absurd micro batch": Case(("trainer.micro_batch_size=1000000000000",),
                               ("trainer.micro_batch_size", "1000000000000")),
    "absurd generation batch": Case(("rollout.generation_batch_size=1000000000000",),
                                    ("rollout.generation_batch_size", "1000000000000")),
    "absurd eval samples": Case(("eval.num_samples=1000000000000",), ("eval.num_samples", "1000000000000")),
    "missing config file": Case((), ("no_such_config.yaml", "does not exist"),
                                command=("train", "{root}/no_such_config.yaml", "--output-dir", "{out}")),
    # --- data ----------------------------------------------------------------------------------
    "missing data file": Case(("data.train_path={root}/no_such_file.jsonl",), ("no_such_file.jsonl", "does not exist")),
    "empty data file": Case(("data.train_path={root}/empty.jsonl",), ("empty.jsonl", "no records")),
    "malformed JSONL line": Case(("data.train_path={root}/malformed.jsonl",), ("malformed.jsonl", "line 2",
                                                                               "invalid JSON")),
    "missing prompt column": Case(("data.train_path={root}/no_prompt_column.jsonl",),
                                  ("no_prompt_column.jsonl", "'prompt'", "'question'")),
    "extra column that does not exist": Case(("data.extra_keys=[difficulty]",), ("train.jsonl", "'difficulty'")),
    "split given for a file": Case(("data.split=test",), ("split", "train.jsonl")),
    "chat template the tokenizer lacks": Case(("data.chat_template=true",), ("chat_template", "no chat template")),
    "missing eval file": Case(("data.eval_path={root}/no_such_eval.jsonl",), ("no_such_eval.jsonl", "does not exist")),
    "all prompts over the length limit": Case(("data.max_prompt_tokens=1",), ("data.max_prompt_tokens", "1")),
    "prompt + response longer than the model's positions": Case(
        ("rollout.max_new_tokens=5000",), ("rollout.max_new_tokens", "5000", "positions", "data.max_prompt_tokens")),
    "held-out prompt + eval response longer than the model's positions": Case(
        ("eval.max_new_tokens=5000",), ("eval.max_new_tokens", "5000", "positions", "held-out prompt")),
    # --- rewards -------------------------------------------------------------------------------
    "reward module that does not import": Case(("rewards=[{name: 'no_such_reward_module:score'}]",),
                                               ("no_such_reward_module",)),
    "reward file without the function": Case(("rewards=[{name: '{root}/reward_without_fn.py:reverse_match'}]",),
                                             ("reward_without_fn.py", "'reverse_match'")),
    "reward file with a syntax error": Case(("rewards=[{name: '{root}/broken_reward.py:reverse_match'}]",),
                                            ("broken_reward.py", "SyntaxError")),
    "unknown option of a built-in reward": Case(("rewards=[{name: math, options: {bogus: 1}}]",),
                                                ("rewards[0].options.bogus", "the math reward", "valid options")),
    "two rewards with one name": Case(
        ("rewards=[{name: '{root}/rewards.py:reverse_match'}, {name: '{root}/reward_without_fn.py:something_else'}, "
         "{name: '{root}/rewards.py:reverse_match', weight: 2}]",), ("rewards", "reverse_match", "unique")),
    "unknown built-in reward": Case(("rewards=[{name: exact_mtch}]",), ("'exact_mtch'", "'exact_match'")),
    "a reward's gold-answer column missing from the data": Case(
        ("rewards=[{name: exact_match}]", "data.answer_key=solution"),
        ("'exact_match'", "'answer'", "data.answer_key", "data.train_path")),
    "accuracy reward that is not configured": Case(
        ("eval.accuracy_reward=no_such_reward",), ("eval.accuracy_reward", "no_such_reward")),
    # --- model ---------------------------------------------------------------------------------
    "model path that does not exist": Case(("model.name_or_path={root}/no_such_model",),
                                           ("model.name_or_path", "no_such_model")),
    "hub model name on an offline machine": Case(("model.name_or_path=some-org/some-model-that-is-not-cached",),
                                                 ("model.name_or_path", "some-org/some-model-that-is-not-cached",
                                                  "offline")),
    "model directory that holds no model": Case(("model.name_or_path={root}",),
                                                ("model.name_or_path", "without config.json")),
    "model path that is a file": Case(("model.name_or_path={root}/train.jsonl",), ("model.name_or_path", "is a file")),
    "tokenizer path that does not exist": Case(("model.tokenizer={root}/no_such_tokenizer",),
                                               ("model.tokenizer", "no_such_tokenizer")),
    "CUDA asked for on a machine without one": Case(
        ("trainer.device=cuda",), ("trainer.device", "cuda"),
        marks=(pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA"),)),
    "LoRA target modules the model lacks": Case(
        ("model.lora.enabled=true", "model.lora.target_modules=[no_such_proj]"),
        ("model.lora.target_modules", "no_such_proj"), before_model=False,
        marks=(pytest.mark.skipif(not _installed("peft"), reason="peft is not installed"),)),
    "attention kernel that is not installed": Case(
        ("model.attn_implementation=flash_attention_2",), ("model.attn_implementation", "flash_attention_2"),
        before_model=False,
        marks=(pytest.mark.skipif(_installed("flash_attn"), reason="flash-attn is installed"),)),
    "vLLM engine without vLLM": Case(
        ("rollout.engine=vllm",), ("rollout.engine", "vllm"),
        marks=(pytest.mark.skipif(_installed("vllm"), reason="vllm is installed"),)),
    "tracker whose package is not installed": Case(
        ("trainer.trackers=[wandb]",), ("trainer.trackers", "wandb"),
        marks=(pytest.mark.skipif(_installed("wandb"), reason="wandb is installed"),)),
    "critic path that does not exist": Case(("algorithm.preset=ppo", "model.critic_name_or_path={root}/no_critic"),
                                            ("model.critic_name_or_path", "no_critic")),
    # --- command line --------------------------------------------------------------------------
    "--output-dir that is a file": Case((), ("--output-dir", "train.jsonl", "is a file"),
                                        command=("train", "{config}", "--output-dir", "{root}/train.jsonl")),
    "--resume without --output-dir": Case((), ("--resume", "--output-dir"), command=("train", "{config}", "--resume")),
    "--overwrite without --output-dir": Case((), ("--overwrite", "--output-dir"),
                                             command=("train", "{config}", "--overwrite")),
    "two config files": Case(("{config}",), ("unexpected argument", "key=value")),
    # --- the built-in demo ----------------------------------------------------------------------
    "demo asked for more strings than exist": Case(
        ("demo.min_len=1", "demo.max_len=1", "demo.num_train=4", "demo.num_eval=4", "demo.warmstart_steps=0",
         "trainer.max_steps=1"), ("demo.num_train", "demo.max_len"), command=("train", "--output-dir", "{out}"),
        marks=(pytest.mark.skipif(not _demo_ready(), reason="steadyrl.demo does not export make_splits yet"),)),
    # --- eval ----------------------------------------------------------------------------------
    "eval of a folder that holds no run": Case((), ("--output-dir", "config.yaml"),
                                               command=("eval", "--output-dir", "{root}/not_a_run")),
    "eval with no held-out prompts": Case(
        ("data.eval_path=null",), ("data.eval_path",), command=("eval", "{config}", "--model", "{root}/model")),
    "eval response longer than the model's positions": Case(
        ("eval.max_new_tokens=5000",), ("eval.max_new_tokens", "5000", "positions"),
        command=("eval", "{config}", "--model", "{root}/model")),
    "eval of a model with no config (no held-out data)": Case(
        (), ("nothing to evaluate", "data.eval_path", "--output-dir"), command=("eval", "--model", "{root}/model")),
    "eval of a model with a config without held-out data": Case(
        (), ("nothing to evaluate", "data.eval_path"),
        command=("eval", "{config}", "--model", "{root}/model", "data.eval_path=null", "data.train_path=null")),
    "eval of a model path that does not exist": Case(
        (), ("no_such_model",), command=("eval", "{config}", "--model", "{root}/no_such_model")),
}


class ModelLoadAttempted(Exception):
    """Raised by the patched loaders: the run got as far as loading model weights."""


@pytest.fixture
def model_loads(monkeypatch):
    """Records every ``from_pretrained`` of a model; with ``.forbid = True`` the first one raises."""
    class Recorder(list):
        forbid = False

    calls = Recorder()
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        original = cls.from_pretrained

        def patched(name, *args, _original=original, **kwargs):
            calls.append(str(name))
            if calls.forbid:
                raise ModelLoadAttempted(f"model weights loaded from {name}")
            return _original(name, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", patched)
    return calls


def _argv(case: Case, tiny_run, out) -> list[str]:
    fill = {"{root}": str(tiny_run.root), "{config}": str(tiny_run.config), "{out}": str(out)}
    argv = []
    for part in (*case.command, *case.args):
        for key, value in fill.items():
            part = part.replace(key, value)
        argv.append(part)
    return argv


def hub_offline(monkeypatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True, raising=False)


def _check_error_line(code: int, err: str, names: tuple[str, ...]) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert code == 2, f"exit status {code}, stderr:\n{err}"
    assert len(lines) == 1, f"expected exactly one line on stderr, got:\n{err}"
    line = lines[0]
    assert line.startswith("steadyrl: error: "), line
    for name in names:
        assert name in line, f"{name!r} not in {line!r}"
    return line


def _params():
    for name, case in CASES.items():
        yield pytest.param(case, id=name, marks=case.marks)


@pytest.mark.parametrize("case", _params())
def test_bad_input_exits_2_with_one_line_naming_it(case, tiny_run, tmp_path, capsys, monkeypatch, model_loads):
    hub_offline(monkeypatch)
    monkeypatch.chdir(tmp_path)
    model_loads.forbid = case.before_model
    out = tmp_path / "run"
    code = cli.main(_argv(case, tiny_run, out))
    captured = capsys.readouterr()
    _check_error_line(code, captured.err, case.names)
    assert not (out / "checkpoints").exists()
    if case.before_model:
        assert model_loads == [], f"the model was loaded before the error: {model_loads}"


@pytest.mark.parametrize("name", ["unknown config key", "malformed JSONL line", "hub model name on an offline machine"])
def test_bad_input_end_to_end_in_a_fresh_process(name, tiny_run, tmp_path, steadyrl_cli):
    """The real command: exit status 2, one line on stderr, no traceback, no checkpoint."""
    case = CASES[name]
    out = tmp_path / "run"
    proc = steadyrl_cli(*_argv(case, tiny_run, out), cwd=tmp_path)
    _check_error_line(proc.returncode, proc.stderr, case.names)
    assert not (out / "checkpoints").exists()


@pytest.mark.parametrize("argv", [
    ["train", "--resume", "--overwrite", "--output-dir", "run"],
    ["train", "--outputdir", "run"],
    ["trian"],
    [],
], ids=["--resume with --overwrite", "misspelt option", "unknown command", "no command"])
def test_command_line_mistakes_exit_2_with_usage_and_no_traceback(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "usage: steadyrl" in err and "error:" in err and "Traceback" not in err


# --- damaged weight files: named, before any weight is loaded (issue 25 item 6) --------------------------

def _damaged_model(tiny_run, tmp_path, how: str):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_run.root / "model", model)
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if how == "header":
        data[:8] = (2**40).to_bytes(8, "little")  # a header longer than the file
    elif how == "json":
        length = int.from_bytes(data[:8], "little")
        data[8:8 + length] = b"{" * length
    elif how == "truncated":  # a shard cut short: half the file
        del data[len(data) // 2:]
    weights.write_bytes(bytes(data))
    return model, weights


@pytest.mark.parametrize("how, says", [("header", "header is damaged"), ("json", "not valid JSON"),
                                       ("truncated", "cut short")])
def test_a_model_with_a_damaged_weight_file_exits_2_naming_the_file(tiny_run, tmp_path, capsys, monkeypatch,
                                                                     model_loads, how, says):
    hub_offline(monkeypatch)
    model, weights = _damaged_model(tiny_run, tmp_path, how)
    model_loads.forbid = True
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(tmp_path / "run"),
                     f"model.name_or_path={model}"])
    _check_error_line(code, capsys.readouterr().err, ("model.name_or_path", str(weights), says))
    assert model_loads == []


def test_a_shard_the_index_names_but_that_is_missing_exits_2(tiny_run, tmp_path, capsys, monkeypatch, model_loads):
    import json

    hub_offline(monkeypatch)
    model, weights = _damaged_model(tiny_run, tmp_path, "none")
    weights.unlink()
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}))
    model_loads.forbid = True
    code = cli.main(["eval", str(tiny_run.config), "--model", str(model)])
    _check_error_line(code, capsys.readouterr().err, ("model-00002-of-00002.safetensors", "missing"))
