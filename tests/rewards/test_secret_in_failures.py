"""An ``{env: NAME}`` key never reaches the console in clear when its reward fails (issue 30,
item 12): the once-shown traceback, the worker's output quoted in it, a warning the function
raises, and the run directory's files are redacted by value (:mod:`steadyrl.secrets`). A 2-step
tiny run whose reward warns and raises with its key, and in a worker process (whose output the
error quotes) prints it too. (In ``inline`` / ``thread`` isolation the function's own ``print``
writes to the trainer's console as any code of the user's would: no worker output to redact.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-leaky-0123456789abcdef"

LEAKY = '''import sys, warnings


def score(prompts, completions, api_key=None, **kw):
    if PRINTS:
        print("worker says key", api_key)
        print("stderr key", api_key, file=sys.stderr)
    warnings.warn(f"warned with {api_key}")
    raise RuntimeError(f"auth failed for key {api_key}")
'''


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["process", "inline"])
def test_a_failing_reward_never_prints_its_env_key(tmp_path, isolation):
    from tests.cli.conftest import _records, write_jsonl
    from steadyrl.demo.model import build_tiny_model
    from steadyrl.demo.task import VOCAB_CHARS
    from steadyrl.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(VOCAB_CHARS)
    build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, seed=0).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    records = _records(24, seed=0)
    write_jsonl(tmp_path / "train.jsonl", records[:16])
    write_jsonl(tmp_path / "eval.jsonl", records[16:])
    (tmp_path / "leaky.py").write_text(LEAKY.replace("PRINTS", str(isolation == "process")))
    config = {
        "model": {"name_or_path": str(tmp_path / "model")},
        "data": {"train_path": str(tmp_path / "train.jsonl"), "eval_path": str(tmp_path / "eval.jsonl")},
        "rewards": [{"name": f"{tmp_path / 'leaky.py'}:score", "isolation": isolation,
                     "options": {"api_key": {"env": "LEAKY_KEY"}}}],
        "rollout": {"prompts_per_step": 4, "group_size": 2, "max_new_tokens": 4},
        "trainer": {"max_steps": 2, "save_every": 0, "num_threads": 1, "samples_every": 1},
        "eval": {"num_samples": 1},
    }
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "LEAKY_KEY": KEY}
    proc = subprocess.run([sys.executable, "-m", "steadyrl", "train", str(tmp_path / "cfg.yaml"), "--output-dir",
                           str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert "failed on some samples" in output and "auth failed for key <redacted>" in output, output[-3000:]
    assert KEY not in output
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]


def test_report_step_prints_a_traceback_redacted_and_escaped(capsys):
    import types

    from steadyrl.run.report import report_step
    from steadyrl.secrets import Secret

    Secret("sk-known-to-this-process-42")  # read from {env: NAME} when the reward was built
    text = "RuntimeError: key sk-known-to-this-process-42 refused for 'hi\x1b]52;c;aGk=\x07'\n"
    run = types.SimpleNamespace(state=types.SimpleNamespace(skipped_steps=0, warnings=0))
    extras = {"result": types.SimpleNamespace(errors={"judge": text})}
    report_step(run, 1, {}, extras, set(), 0)
    out = capsys.readouterr().out
    assert "sk-known-to-this-process-42" not in out and "<redacted>" in out
    assert "\x1b" not in out and "\\x1b]52" in out


def test_the_evaluation_failure_note_is_redacted_and_escaped(capsys):
    import types

    from steadyrl.run.evaluate import _report_failures
    from steadyrl.secrets import Secret

    Secret("sk-known-to-this-process-43")
    _report_failures(types.SimpleNamespace(errors={"judge": "key sk-known-to-this-process-43 \x1b[2J"}), set())
    out = capsys.readouterr().out
    assert "sk-known-to-this-process-43" not in out and "\x1b" not in out


def test_a_warning_quoting_a_key_is_shown_redacted(monkeypatch):
    import warnings

    from steadyrl.run.warnings_once import warnings_once
    from steadyrl.secrets import Secret

    Secret("sk-known-to-this-process-44")
    shown = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args: shown.append(str(message)))
    with warnings_once() as seen:
        warnings.simplefilter("always")
        warnings.warn("bad key sk-known-to-this-process-44")
    assert len(shown) == 1 and "sk-known-to-this-process-44" not in shown[0] and "<redacted>" in shown[0]
    assert not any("sk-known" in s for s in seen.uncounted)


def test_a_crash_traceback_of_the_command_is_redacted(capsys, monkeypatch):
    from steadyrl import cli
    from steadyrl.secrets import Secret, redacting_excepthook

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    assert cli.main(["config", "show", "algorithm.preset=grpo"]) == 0
    assert sys.excepthook is redacting_excepthook  # what the steadyrl command's crashes go through
    Secret("sk-known-to-this-process-45")
    try:
        raise RuntimeError("the server refused sk-known-to-this-process-45")
    except RuntimeError as err:
        redacting_excepthook(type(err), err, err.__traceback__)
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: the server refused <redacted>" in err
    assert "sk-known-to-this-process-45" not in err
