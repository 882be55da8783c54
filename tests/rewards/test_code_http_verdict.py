"""``backend: http`` (SandboxFusion): an ``assert`` test's verdict is the reward's, not the program's
exit status. Before, the program, the setup and the assert went to the server as one script that
passed when it exited 0, so ``import os; os._exit(0)`` at the program's top passed every assert.
Now a converted assert is split into calls whose values come back as tagged data, and the check is
evaluated by the reward (as the local backend does). The server here is a stand-in that really runs
each script with this interpreter (our own test programs only)."""

from __future__ import annotations

import subprocess
import sys

from support_http import ScriptedServer

from steadyrl.rewards import load_reward

TESTS = ["assert add(1, 2) == 3", "assert add(-4, 4) == 0", "assert sorted(pair(2)) == [2, 3]"]
HONEST = "def add(a, b):\n    return a + b\n\ndef pair(x):\n    return (x + 1, x)\n"
WRONG = "def add(a, b):\n    return a - b\n\ndef pair(x):\n    return (x, x)\n"
CHEATS = [
    "import os\nos._exit(0)\n",  # exits 0 before the assert runs
    "import sys\nsys.exit(0)\n",
    "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0\n"
    "def pair(x):\n    return ()\n",  # a failed assert's exit status turned into 0
    "import os\nprint('__steadyrl_value__:[\"b\", true]')\nos._exit(0)\n",  # a value that is not the call's
]


def _run_for_real(n, path, body):
    """SandboxFusion's ``run_code``, for real: the script under this interpreter, with its stdin."""
    try:
        proc = subprocess.run([sys.executable, "-I", "-c", body["code"]], input=body["stdin"], capture_output=True,
                              text=True, timeout=body["run_timeout"])
    except subprocess.TimeoutExpired:
        return 200, {"status": "Failed", "run_result": {"status": "TimeLimitExceeded", "return_code": None,
                                                        "stdout": "", "stderr": ""}}
    return 200, {"status": "Success" if proc.returncode == 0 else "Failed",
                 "run_result": {"status": "Finished", "return_code": proc.returncode, "stdout": proc.stdout,
                                "stderr": proc.stderr}}


def _scores(programs):
    with ScriptedServer(_run_for_real, max_requests=200) as server:
        fn = load_reward("code", backend="http", url=server.url, test_timeout_s=10.0)
        return fn([""] * len(programs), [f"```python\n{p}```" for p in programs], tests=[TESTS] * len(programs))


def test_an_assert_test_is_judged_by_the_reward_not_by_the_programs_exit_status():
    assert _scores([HONEST, WRONG]) == [1.0, 0.0]
    assert _scores(CHEATS) == [0.0] * len(CHEATS)
