"""Libraries' tqdm bars stay out of logs (issue 33, item 11): `steadyrl convert` and `steadyrl doctor
CONFIG` wrote transformers' bars into logs; without a terminal on stderr the CLI turns them off."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _bar_output(env_extra: dict) -> str:
    code = ("from steadyrl.cli import no_bars_without_a_tty\nno_bars_without_a_tty()\n"
            "from tqdm.auto import tqdm\nfor _ in tqdm(range(3), desc='de-quantising'):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"} | {"PYTHONPATH": str(REPO), **env_extra}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_library_progress_bars_are_off_when_stderr_is_not_a_terminal():
    assert "de-quantising" not in _bar_output({})


def test_a_tqdm_disable_you_set_wins(monkeypatch):
    from steadyrl.cli import no_bars_without_a_tty

    monkeypatch.setenv("TQDM_DISABLE", "false")
    no_bars_without_a_tty()
    assert os.environ["TQDM_DISABLE"] == "false"
