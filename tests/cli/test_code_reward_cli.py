"""``steadyrl train`` with the ``code`` reward: a run scores through it (in a worker process, the
whole batch per call) and logs its metrics, and each bad input - data without the test column, an
unknown test format, a sandbox URL nothing listens on - exits 2 with one line naming it before any
model weights load."""

from __future__ import annotations

import json

import pytest
import transformers
from support_http import free_port

from steadyrl import cli

TESTS = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})


def with_tests(tiny_run, tmp_path):
    """The tiny run's training data with a ``tests`` column."""
    rows = [json.loads(line) for line in tiny_run.train.read_text().splitlines()]
    path = tmp_path / "code.jsonl"
    path.write_text("".join(json.dumps({**row, "tests": TESTS}) + "\n" for row in rows))
    return path


def test_a_run_scored_by_the_code_reward_logs_its_failures_and_isolation(tiny_run, tmp_path):
    from steadyrl.tracking import read_metrics

    out = tmp_path / "run"
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(out), f"data.train_path={with_tests(tiny_run, tmp_path)}",
                     "data.eval_path=null", "rewards=[{name: code, options: {workers: 2, test_timeout_s: 1}}]",
                     "trainer.max_steps=1"])
    assert code == 0
    step = [m for m in read_metrics(out) if m["step"] == 1][0]
    # the tiny model writes no code block: every sample scores 0, counted as no_code
    assert step["reward/code/mean"] == 0.0 and step["reward/code/failures/no_code"] == 16
    assert step["reward/code/network_isolated"] in (0.0, 1.0)


CASES = {
    "data without the test column": ("rewards=[{name: code}]", ("'code'", "reads column 'tests'")),
    "unknown test format": ("rewards=[{name: code, options: {tests_key: answer, test_format: junit}}]",
                            ("steadyrl: error: invalid configuration: rewards[0].options.test_format", "'junit'", "'stdio'")),
    "sandbox URL that is unreachable": (
        "rewards=[{name: code, options: {tests_key: answer, backend: http, url: 'http://127.0.0.1:PORT'}}]",
        ("rewards[0]: code reward", "option url", "cannot connect")),
    # the entry is named: the second of two code rewards is the wrong one
    "an option out of range in the second entry": (
        "rewards=[{name: code, options: {tests_key: answer}}, {name: code, label: code_b, options: {tests_key: "
        "answer, workers: 0}}]", ("steadyrl: error: invalid configuration: rewards[1].options.workers = 0",
                                  "greater than or equal to 1")),
    "an unknown option": ("rewards=[{name: code, options: {tests_key: answer, worker: 2}}]",
                          ("rewards[0].options.worker = 2", "unknown option of the code reward", "did you mean 'workers'?",
                           "valid options")),
    # checked with the config, before the data and every reward are read, whatever check_url says
    "sandbox URL that is not http(s)": (
        "rewards=[{name: code, options: {tests_key: answer, backend: http, check_url: false, url: 'localhost:8080'}}]",
        ("steadyrl: error: invalid configuration: rewards[0].options.url = 'localhost:8080'", "its scheme is",
         "valid: an http:// or https:// URL with a host")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_code_reward_input_exits_2_naming_it_before_any_model_loads(case, tiny_run, tmp_path, capsys,
                                                                        monkeypatch):
    override, names = CASES[case]
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail(f"weights loaded: {a[0]}"))
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(tmp_path / "run"),
                     override.replace("PORT", str(free_port()))])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steadyrl: error: "), err
    for name in names:
        assert name in lines[0], f"{name!r} not in {lines[0]!r}"
