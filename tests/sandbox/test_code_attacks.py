"""Hostile programs through the real ``code`` reward (``RewardScorer``, the built-in with its default
isolation, a worker process): each attack sits between two correct programs, scores 0 with its
reason counted in ``reward/code/failures/<reason>``, the correct programs still score 1, this
process (the trainer) lives on and scores the next batch, and afterwards no process the programs
started is alive. Every attack is bounded by itself too (a few forks, a print loop killed at the
output cap), so a failure of the sandbox cannot take the machine down."""

from __future__ import annotations

import os
import secrets
import socket
import time

import pytest

from steadyrl.rewards import RewardScorer, RewardSpec, load_reward
from steadyrl.sandbox.programs import CODE_TAG_VAR, TAG_PREFIX_VAR

ADD = "a, b = map(int, open(0).read().split())\nprint(a + b)"
TESTS = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
OPTIONS = {"test_timeout_s": 2.0, "sample_timeout_s": 4.0, "workers": 3, "memory_mb": 256, "processes": 8,
           "max_output_kib": 64}


def block(source: str) -> str:
    return f"```python\n{source}\n```"


@pytest.fixture(autouse=True)
def own_tag(monkeypatch):
    """This test's programs carry tags starting with a token of its own (the workers inherit it),
    so :func:`survivors` sees them and never another test run's."""
    token = "t" + secrets.token_hex(6)
    monkeypatch.setenv(TAG_PREFIX_VAR, token)
    return token


def survivors(within_s: float = 30.0) -> list[int]:
    """Live processes carrying a tag of this test's (every program and harness has one); waits up to
    ``within_s`` for killed ones to go (at once when none is left: the wait only bounds a failure)."""
    marker = f"{CODE_TAG_VAR}={os.environ[TAG_PREFIX_VAR]}".encode()
    deadline = time.monotonic() + within_s
    while True:
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    env = f.read()
                with open(f"/proc/{name}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in env and state != "Z":
                found.append(int(name))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


# The trainer's interpreter; and, run as root, a system one readable by others, with which the
# programs run as nobody (where RLIMIT_NPROC holds): both ways of the sandbox are attacked.
# Each with the sandbox the machine gives (bubblewrap's view where installed), and the trainer's
# with the hand-written namespaces (the fallback where bubblewrap is not installed).
PYTHONS = [None] + (["/usr/bin/python3"] if os.getuid() == 0 and os.path.exists("/usr/bin/python3") else [])
SETUPS = [(p, "auto") for p in PYTHONS] + [(None, "namespaces")]


@pytest.fixture(scope="module", params=SETUPS, ids=lambda s: f"{s[0] or 'trainer-python'}-{s[1]}")
def reward(request):
    os.environ["STEADYRL_FAKE_SECRET"] = "hunter2"
    os.environ["PLAIN_LOOKING_VAR"] = "hunter2"
    python, sandbox = request.param
    try:
        yield load_reward("code", **OPTIONS, python=python, sandbox=sandbox)
    finally:
        os.environ.pop("STEADYRL_FAKE_SECRET", None)
        os.environ.pop("PLAIN_LOOKING_VAR", None)


def run_attack(reward, source: str, tests=TESTS):
    with RewardScorer([RewardSpec("code", reward, timeout_s=30)]) as scorer:
        result = scorer.score(["p"] * 3, [block(ADD), block(source), block(ADD)], {"tests": [tests] * 3})
        again = scorer.score(["p"], [block(ADD)], {"tests": [tests]})  # the trainer and the worker go on
    assert again.raw["code"] == [1.0]
    assert result.raw["code"][0] == 1.0 and result.raw["code"][2] == 1.0, result.errors
    assert result.raw["code"][1] == 0.0
    assert survivors() == []
    return {k.rsplit("/", 1)[1]: v for k, v in result.metrics.items() if "/failures/" in k}


ATTACKS = {
    "fork_bomb": ("import os, time\nfor _ in range(6):\n    os.fork()\ntime.sleep(30)",
                  {"processes", "timeout", "runtime_error"}),  # runtime_error: fork fails (RLIMIT_NPROC)
    "memory_bomb": ("x = bytearray(8 * 1024 ** 3)", {"memory"}),
    "growing_memory": ("a = []\nwhile True:\n    a.append(bytearray(32 * 1024 * 1024))", {"memory"}),
    "infinite_loop": ("while True:\n    pass", {"timeout"}),
    "children_outlive_it": ("import os\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n"
                            "        if os.fork() == 0:\n            while True:\n                pass\n"
                            "        os._exit(0)\nprint('not the answer')", {"wrong_answer"}),
    "prints_until_killed": ("while True:\n    print('x' * 65536)", {"output_limit"}),
    "kills_its_parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(3)",
                         {"crashed", "killed", "runtime_error"}),
    "kills_the_trainer": (f"import os\nos.kill({os.getpid()}, 9)\nprint(3)", {"runtime_error", "crashed"}),
    "exits_at_once": ("import os\nos._exit(0)", {"wrong_answer"}),
    "deep_recursion": ("def f(n):\n    return f(n + 1)\nf(0)", {"runtime_error"}),
    "reads_missing_stdin": ("input()\ninput()\nprint(3)", {"runtime_error"}),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_attack_scores_zero_with_its_reason_and_leaves_nothing_running(reward, name):
    source, reasons = ATTACKS[name]
    failures = run_attack(reward, source)
    assert set(failures) <= reasons and sum(failures.values()) == 1, failures


def test_the_trainers_secrets_reach_neither_the_environment_nor_proc(reward):
    wants = {"inputs": [""], "outputs": ["hunter2\n"]}  # a program that can read the secret scores 1
    env = "import os\nprint(os.environ.get('STEADYRL_FAKE_SECRET') or os.environ.get('PLAIN_LOOKING_VAR'))"
    proc = (f"data = open('/proc/{os.getpid()}/environ', 'rb').read()\n"
            "print('hunter2' if b'hunter2' in data else 'no')")
    for source in (env, proc):
        with RewardScorer([RewardSpec("code", reward, timeout_s=30)]) as scorer:
            assert scorer.score(["p"], [block(source)], {"tests": [wants]}).raw["code"] == [0.0]
    assert survivors() == []


def test_writing_outside_its_directory_fails_where_the_file_system_is_read_only(reward, tmp_path):
    target = tmp_path / "pwned"
    failures = run_attack(reward, f"open({str(target)!r}, 'w').write('x')\nprint(3)")
    if reward.isolation.get("readonly_fs"):
        assert failures == {"runtime_error": 1.0} and not target.exists()
    else:  # documented: without a mount namespace a program writes wherever its user may
        target.unlink(missing_ok=True)


def test_opening_a_socket_fails_where_there_is_a_network_namespace(reward):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        failures = run_attack(reward, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
                                      "print(3)")
    finally:
        listener.close()
    if reward.isolation.get("network"):
        assert failures == {"runtime_error": 1.0}


def test_a_batch_past_the_rewards_own_time_limit_leaves_nothing_running(reward):
    """The scorer's timeout_s ends the whole call: the worker, the harnesses and every program die."""
    busy = block("import os\nos.fork()\nwhile True:\n    pass")
    slow = load_reward("code", **{**OPTIONS, "test_timeout_s": 20.0, "sample_timeout_s": 30.0}, python=reward.python,
                       sandbox=reward.sandbox)
    with RewardScorer([RewardSpec("code", slow, timeout_s=1.5)]) as scorer:
        result = scorer.score(["p"] * 3, [busy] * 3, {"tests": [TESTS] * 3})
    assert result.raw["code"] == [None] * 3 and result.failures["code"]["timeout"] == 3
    assert survivors() == []


def test_a_program_may_start_a_few_processes_of_its_own(reward):
    source = ("import os\nkids = [os.fork() for _ in range(1)]\nif 0 in kids:\n    os._exit(0)\n"
              "for _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)\n"
              "os.waitpid(kids[0], 0)\n" + ADD)
    with RewardScorer([RewardSpec("code", reward, timeout_s=30)]) as scorer:
        assert scorer.score(["p"], [block(source)], {"tests": [TESTS]}).raw["code"] == [1.0]
    assert survivors() == []


def test_probing_the_isolation_leaves_nothing_running():
    """The probe (run when a code reward is built) forks a pid namespace's first process too."""
    from steadyrl.sandbox.programs import probe_isolation

    for _ in range(3):
        assert set(probe_isolation()) >= {"network", "readonly_fs", "user"}
    assert survivors() == []


def test_a_harness_that_overruns_is_killed_with_its_whole_session(tmp_path):
    """run_program's own deadline (sample time + grace): a stuck harness and a busy process it
    started are killed, the reply says timeout (the fake would otherwise end after 30 s with no
    reply: "a broken reply")."""
    from steadyrl.sandbox.programs import run_program

    fake = tmp_path / "stuck-python"
    fake.write_text("#!/bin/sh\n(while :; do :; done) &\nsleep 30\n")
    fake.chmod(0o755)
    job = {"source": "", "mode": "stdio", "cases": [""], "test_time_s": 0.2, "sample_time_s": 0.2,
           **{k: OPTIONS[k] for k in ("memory_mb", "processes")}, "file_size_mb": 1, "open_files": 16,
           "output_bytes": 1024, "network": False, "readonly_fs": False}
    assert run_program(job, python=str(fake)) == {"error": "timeout", "results": []}
    assert survivors() == []
