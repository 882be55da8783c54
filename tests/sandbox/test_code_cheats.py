"""Reward hacks against the ``code`` reward's checks (not escapes): a program that solves nothing
and still scores. At 11aa87c each of these scored 1; here each scores 0, and an honest program of
the same shape still scores 1. The ``assert`` cheats are the red team's list and more: patching
``AssertionError``, ``builtins``, ``exec``, ``json``, ``sys.exit`` / ``os._exit(0)`` after writing
fake results on the harness's pipe, objects whose ``__eq__`` is always true, subclasses of
``int``. Converted ``assert`` tests are judged outside the program (:mod:`steadyrl.rewards.code_asserts`)."""

from __future__ import annotations

import pytest

from steadyrl.rewards import RewardScorer, RewardSpec, load_reward
from steadyrl.rewards.code_tests import stdout_matches, value_matches

OPTIONS = {"test_timeout_s": 1.0, "sample_timeout_s": 8.0, "workers": 4, "memory_mb": 256}
ASSERTS = ["assert add(1, 2) == 3", "assert add(20, 22) == 42", "assert add(-1, 1) == 0"]
HONEST = "def add(a, b):\n    return a + b"


def block(source: str) -> str:
    return f"```python\n{source}\n```"


@pytest.fixture(scope="module")
def reward():
    return load_reward("code", **OPTIONS)


def scores(reward, sources: list[str], tests) -> list:
    with RewardScorer([RewardSpec("code", reward, timeout_s=60)]) as scorer:
        return scorer.score(["p"] * len(sources), [block(s) for s in sources], {"tests": [tests] * len(sources)}).raw["code"]


FAKE_REPORTS = ("import os\nfor i in range(8):\n    os.write(3, ('{\"case\": %d, \"status\": \"ok\"}\\n' % i).encode())\n"
                "    os.write(3, b'{\"ready\": true}\\n')\n")
CHEATS = {
    "eq_always_true": "class Any:\n    def __eq__(self, other):\n        return True\n"
                      "def add(a, b):\n    return Any()",
    "int_subclass_eq": "class Int(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
                       "def add(a, b):\n    return Int(7)",
    "patched_exec": "import builtins\nbuiltins.exec = lambda *a, **k: None\ndef add(a, b):\n    return 7",
    "patched_compile": "import builtins\nbuiltins.compile = lambda *a, **k: compile('pass', 'x', 'exec')\n"
                       "def add(a, b):\n    return 7",
    "patched_assertion_error": "import builtins\nclass Never(Exception):\n    pass\nbuiltins.AssertionError = Never\n"
                               "def add(a, b):\n    return 7",
    "patched_json": "import json\nn = iter(range(100))\n"
                    "json.dumps = lambda obj, *a, **k: '{\"case\": %d, \"status\": \"ok\"}' % next(n)\n"
                    "def add(a, b):\n    return 7",
    "fake_reports_then_os_exit": FAKE_REPORTS + "os._exit(0)",
    "fake_reports_then_sys_exit": FAKE_REPORTS + "import sys\nsys.exit(0)",
    "exit_inside_the_call": "import os\ndef add(a, b):\n" + "".join(
        "    " + line + "\n" for line in FAKE_REPORTS.splitlines()[1:]) + "    os._exit(0)",
    "patched_os_write": "import os\n_write = os.write\n"
                        "os.write = lambda fd, data: _write(fd, data.replace(b'\"wrong_answer\"', b'\"ok\"'))\n"
                        "def add(a, b):\n    return 7",
    "returns_a_generator": "def add(a, b):\n    yield a + b",
}


def test_an_honest_program_passes_converted_asserts(reward):
    assert scores(reward, [HONEST], ASSERTS) == [1.0]


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_a_program_cannot_cheat_assert_tests(reward, name):
    assert scores(reward, [CHEATS[name], HONEST], ASSERTS) == [0.0, 1.0]


def test_a_program_cannot_reset_its_test_clock(reward):
    """Writing ``{"start": i}`` on fd 3 restarted the clock at 11aa87c: a 4x-too-slow call passed."""
    slow = ("import os, time\ndef double(x):\n    for _ in range(4):\n        try:\n"
            "            os.write(3, b'{\"start\": 0}\\n')\n        except OSError:\n            pass\n"
            "        time.sleep(0.45)\n    return 2 * x")
    tests = {"fn_name": "double", "inputs": [[2]], "outputs": [4]}
    with RewardScorer([RewardSpec("code", reward, timeout_s=60)]) as scorer:
        result = scorer.score(["p"], [block(slow)], {"tests": [tests]})
    assert result.raw["code"] == [0.0] and result.metrics["reward/code/failures/timeout"] == 1.0
    assert scores(reward, ["def double(x):\n    return 2 * x"], tests) == [1.0]


def test_integers_compare_exactly_and_floats_within_the_tolerance():
    assert not stdout_matches("1000000000\n", "1000000007\n", 1e-6)
    assert not stdout_matches("1000000000.0\n", "1000000007\n", 1e-6)  # nor as a float
    assert stdout_matches("1000000007.0\n", "1000000007\n", 1e-6)
    assert stdout_matches("0.3333333\n", "0.33333333\n", 1e-6)  # floats keep the tolerance
    assert not value_matches(1000000000, 1000000007, 1e-6)
    assert not value_matches(1000000000.0, 1000000007, 1e-6)
    assert value_matches(0.1 + 0.2, 0.3, 1e-6)


def test_integer_answers_through_the_reward(reward):
    tests = {"inputs": [""], "outputs": ["1000000007\n"]}
    assert scores(reward, ["print(1000000000)", "print(10**9 + 7)"], tests) == [0.0, 1.0]


def test_assert_shapes_that_convert_judge_like_python(reward):
    """Tuples stay tuples, sets and sorted compare as Python would, floats through math.isclose."""
    program = ("def pair(x):\n    return (x, x)\ndef evens(n):\n    return [i for i in range(n) if i % 2 == 0]\n"
               "def third(x):\n    return x / 3\ndef none():\n    return None")
    good = ["assert pair(1) == (1, 1)", "assert set(evens(5)) == {0, 2, 4}", "assert sorted(evens(5), reverse=True) == [4, 2, 0]",
            "assert math.isclose(third(1), 0.3333, rel_tol=0.001)", "assert none() is None", "assert not none()",
            "assert len(evens(10)) == 5 and evens(3) == [0, 2]", "assert pair(2)[0] == 2 and evens(9)[1:3] == [2, 4]"]
    assert scores(reward, [program], "import math\n" + "\n".join(good)) == [1.0]
    assert scores(reward, [program], ["assert pair(1) == [1, 1]"]) == [0.0]  # a list is not a tuple


def test_asserts_that_do_not_convert_still_run_confined(reward):
    """A method call, a name from the setup: run in the program's process, as before."""
    tests = "class Helper:\n    k = 2\nassert Solution().f(2) == 4\nassert f(Helper.k) == 4"
    program = "class Solution:\n    def f(self, x):\n        return x * 2\ndef f(x):\n    return x * 2"
    assert scores(reward, [program, "def f(x):\n    return 7"], tests) == [1.0, 0.0]


def test_flooding_the_reply_pipe_ends_at_the_output_cap(reward):
    """The harness keeps what the program writes on fd 3 no longer than stdout: past the cap, the test ends."""
    flood = "import os\nwhile True:\n    os.write(3, b'x' * 65536)"
    with RewardScorer([RewardSpec("code", reward, timeout_s=60)]) as scorer:
        result = scorer.score(["p"], [block(flood)], {"tests": [ASSERTS]})
    assert result.raw["code"] == [0.0] and result.metrics["reward/code/failures/output_limit"] == 1.0
