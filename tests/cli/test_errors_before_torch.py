"""Every input check that needs no model answers before torch is imported (issue 24, item 6): a
missing data file, a missing column, a missing model directory, a bad reward or tool spec, a run
directory in use, ``eval --model`` with no held-out data. Each still exits 2 with one line naming
the problem; the test checks which modules were imported when it was printed, not how long it
took (the time is measured by ``benchmarks/bench_errors.py``).

All cases run in one fresh interpreter (this test process imported torch long ago); the lock
case has a second process hold the run directory's lock, as a running ``steadyrl train`` does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def inputs(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # a save_pretrained layout: never loaded by these cases
    (tmp_path / "data.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    (tmp_path / "no_prompt.jsonl").write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")
    (tmp_path / "tools.py").write_text("X = 1\n")
    config = {"model": {"name_or_path": str(model)},
              "data": {"train_path": str(tmp_path / "data.jsonl"), "eval_path": str(tmp_path / "data.jsonl")}}
    (tmp_path / "cfg.yaml").write_text(json.dumps(config))
    (tmp_path / "busy").mkdir()
    return tmp_path


def _run_in_fresh_process(cases: list[list[str]], heavy=("torch", "transformers")) -> list[dict]:
    """``[{code, err, heavy}]``: each case's exit status, stderr and the ``heavy`` modules imported by then."""
    script = textwrap.dedent(f"""
        import contextlib, io, json, sys
        from steadyrl.cli import main
        out = []
        for argv in {cases!r}:
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = main(argv)
            out.append({{"code": code, "err": err.getvalue(),
                         "heavy": [m for m in {tuple(heavy)!r} if m in sys.modules]}})
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _hold_lock(run_dir: Path) -> subprocess.Popen:
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.lockf(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode()); print('held', flush=True); "
            "time.sleep(300)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(run_dir / ".steadyrl-lock")],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_input_errors_are_answered_before_torch_is_imported(inputs):
    cfg = str(inputs / "cfg.yaml")
    cases = {
        "missing data file": (["train", cfg, f"data.train_path={inputs / 'nope.jsonl'}"],
                              ["nope.jsonl", "does not exist"]),
        "missing column": (["train", cfg, f"data.train_path={inputs / 'no_prompt.jsonl'}"],
                           ["no_prompt.jsonl", "no prompt column 'prompt'"]),
        "missing model directory": (["train", cfg, f"model.name_or_path={inputs / 'no_model'}"],
                                    ["model.name_or_path", "no_model", "no such directory"]),
        "bad reward spec": (["train", cfg, f"rewards=[{{name: {inputs / 'nope.py'}:score}}]"],
                            ["rewards[0]", "nope.py"]),
        "bad tool spec": (["train", cfg, f"rollout.multi_turn.tools=[{inputs / 'tools.py'}:add]"],
                          ["rollout.multi_turn.tools[0]", "tools.py", "add"]),
        "a run directory in use": (["train", cfg, "--output-dir", str(inputs / "busy"), "--overwrite"],
                                   ["in use by another steadyrl run", "PID"]),
        "eval --model, nothing held out": (["eval", "--model", str(inputs / "model")],
                                           ["nothing to evaluate model", "data.eval_path"]),
        "eval --model, eval file missing": (["eval", cfg, f"data.eval_path={inputs / 'gone.jsonl'}"],
                                            ["gone.jsonl", "does not exist"]),
    }
    holder = _hold_lock(inputs / "busy")
    try:
        results = _run_in_fresh_process([argv for argv, _ in cases.values()])
    finally:
        holder.kill()
        holder.wait()
    for (name, (_, words)), result in zip(cases.items(), results):
        lines = result["err"].strip().splitlines()
        assert result["code"] == 2 and len(lines) == 1 and lines[0].startswith("steadyrl: error: "), (name, result)
        assert all(word in lines[0] for word in words), (name, lines[0])
        assert result["heavy"] == [], (name, result["heavy"])
    assert str(holder.pid) in results[5]["err"]


def test_the_lock_probe_leaves_a_free_run_directory_free(inputs):
    from steadyrl.run.directory import LOCK, RunLock, probe_lock

    run = inputs / "busy"
    (run / LOCK).write_text("")
    probe_lock(run)  # nobody holds it: no error, and nothing taken
    assert (run / LOCK).read_text() == ""
    holder = _hold_lock(run)  # a second process can still take it: the probe kept nothing
    holder.kill()
    holder.wait()
    with RunLock() as lock:
        lock.acquire(run)
        assert lock.fd is not None


def test_a_config_that_names_its_rewards_does_not_build_the_default_math_reward(inputs):
    """The default reward (math, whose math_verify takes half a second to import) is built only
    when the config names no reward."""
    cfg = str(inputs / "cfg.yaml")
    [result] = _run_in_fresh_process([["train", cfg, f"rewards=[{{name: {inputs / 'nope.py'}:score}}]"]],
                                     heavy=("torch", "math_verify"))
    assert result["code"] == 2 and "nope.py" in result["err"] and result["heavy"] == []
