"""Hostile reward functions through the real reward path (``RewardScorer``, isolation "process"):
each attack fails its samples only, the trainer (this test process) lives on, the next batch is
scored, and afterwards no process the function started is alive (``watch.survivors``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from steadyrl.rewards import RewardScorer, RewardSpec, score_batch
from steadyrl.sandbox import Limits
from steadyrl.sandbox.procs import CODE_TAG_VAR

from .conftest import NOTE_SOURCE

PROMPTS = ["p0", "p1", "p2"]
FINE = ["a", "b", "c"]


def scorer(fn, **kw) -> RewardScorer:
    kw.setdefault("timeout_s", 1.5)
    return RewardScorer([RewardSpec("r", fn, isolation="process", **kw)])


def test_a_time_out_fails_only_the_samples_not_yet_scored(watch):
    def one_hangs(prompts, completions, **kw):
        watch.note()
        if completions[0] == "hang":
            time.sleep(30)
        return [1.0]

    result = score_batch([RewardSpec("r", one_hangs, timeout_s=1.0, isolation="process")],
                         ["p"] * 4, ["a", "b", "hang", "c"])
    assert result.raw["r"] == [1.0, 1.0, None, None]
    assert result.valid.tolist() == [True, True, False, False]
    assert result.failures["r"]["timeout"] == 2
    assert "2 of 4 samples were scored before" in result.errors["r"]
    assert watch.survivors() == []


def test_a_crash_fails_its_sample_and_the_rest_of_the_batch_only(watch):
    def crashes_on_b(prompts, completions, **kw):
        watch.note()
        if completions[0] == "b":
            os._exit(5)
        return [1.0]

    result = score_batch([RewardSpec("r", crashes_on_b, isolation="process")], PROMPTS, FINE)
    assert result.valid.tolist() == [True, False, False]
    assert "worker process died (exit status 5)" in result.errors["r"]
    assert watch.survivors() == []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP])
def test_signalling_its_parent_harms_neither_the_trainer_nor_the_worker(sig, watch):
    """The parent of the user's code is the init of the sandbox's pid namespace: the kernel drops
    signals to it from inside (the old keeper died, or stopped and left the call to time out)."""
    def signals_parent(prompts, completions, **kw):
        watch.note()
        if completions[0] == "b":
            os.kill(os.getppid(), sig)
            time.sleep(0.3)
        return [1.0]

    with scorer(signals_parent) as s:
        first = s.score(PROMPTS, FINE)
        second = s.score(PROMPTS[:1], FINE[:1])
    assert first.valid.tolist() == [True, True, True], first.errors
    assert second.valid.tolist() == [True]
    assert watch.survivors() == []


@pytest.mark.parametrize("how", ["sys.exit", "os._exit"])
def test_exits_fail_their_samples(how, watch):
    def exits(prompts, completions, **kw):
        watch.note()
        if completions[0] == "b":
            sys.exit(2) if how == "sys.exit" else os._exit(2)
        return [1.0]

    with scorer(exits) as s:
        result = s.score(PROMPTS, FINE)
    if how == "sys.exit":  # an exception: only its own sample
        assert result.valid.tolist() == [True, False, True] and "SystemExit: 2" in result.errors["r"]
    else:
        assert result.valid.tolist() == [True, False, False] and "exit status 2" in result.errors["r"]
    assert watch.survivors() == []


def test_a_bounded_fork_bomb_is_stopped_by_the_process_limit(watch):
    """40 sleeping processes against a limit of 6: RLIMIT_NPROC refuses the forks (not root), or
    the keeper's count kills them all (root, which the kernel exempts from RLIMIT_NPROC)."""
    def forks(prompts, completions, **kw):
        watch.note()
        for _ in range(40):
            if os.fork() == 0:
                watch.note()
                time.sleep(30)
                os._exit(0)
        time.sleep(30)
        return [1.0]

    with scorer(forks, limits=Limits(processes=6)) as s:
        result = s.score(PROMPTS[:1], FINE[:1])
    assert result.valid.tolist() == [False]
    assert result.failures["r"]["timeout"] == 0  # stopped by the limit, not by the time-out
    assert "limits.processes=6" in result.errors["r"] or "Resource temporarily unavailable" in result.errors["r"]
    assert watch.survivors() == []


@pytest.mark.skipif(os.getuid() != 0, reason="as another user RLIMIT_NPROC, not the keeper's count, bounds them")
def test_code_programs_below_the_worker_count_against_their_own_limit_not_the_workers(watch):
    """The ``code`` reward's programs run under a keeper of their own, with their own (smaller)
    process limit: the worker's count leaves them out, so a fork bomb stopped in one program does
    not also kill the worker and every sample it was scoring. Processes without the tag still count."""
    def starts(prompts, completions, **kw):
        watch.note()
        env = {**os.environ, CODE_TAG_VAR: "t"} if completions[0] == "tagged" else dict(os.environ)
        children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
                    for _ in range(8)]
        time.sleep(0.6)  # several of the keeper's counts
        for child in children:
            child.kill()
            child.wait()
        return [1.0]

    with scorer(starts, limits=Limits(processes=6), timeout_s=10) as s:
        tagged = s.score(PROMPTS[:1], ["tagged"])
        plain = s.score(PROMPTS[:1], ["plain"])
    assert tagged.valid.tolist() == [True], tagged.errors
    assert plain.valid.tolist() == [False] and "limits.processes=6" in plain.errors["r"]
    assert watch.survivors() == []


def test_children_that_leave_the_session_or_outlive_their_parent_die_at_the_time_out(watch):
    def spawns(prompts, completions, **kw):
        watch.note()
        if os.fork() == 0:  # leaves the session and process group, spins
            os.setsid()
            watch.note()
            while True:
                pass
        if os.fork() == 0:  # its parent exits at once: orphaned, busy
            if os.fork() == 0:
                watch.note()
                while True:
                    pass
            os._exit(0)
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        time.sleep(30)
        return [1.0]

    with scorer(spawns, timeout_s=1.0) as s:
        result = s.score(PROMPTS[:1], FINE[:1])
    assert result.failures["r"]["timeout"] == 1
    assert len(watch.noted(at_least=3)) >= 3
    assert watch.survivors() == []


def test_processes_left_running_by_a_successful_call_die_at_close(watch):
    def leaves_children(prompts, completions, **kw):
        if os.fork() == 0:
            os.setsid()
            watch.note()
            while True:
                pass
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        return [1.0]

    with scorer(leaves_children) as s:
        assert s.score(PROMPTS[:1], FINE[:1]).valid.all()
        watch.noted(at_least=1)
    assert watch.survivors() == []


def test_megabytes_of_output_stay_out_of_the_trainers_log(capfd, watch):
    def prints(prompts, completions, **kw):
        watch.note()
        for i in range(50_000):
            print(f"noise {i} " + "y" * 100)
        raise ValueError("after all that printing")

    with scorer(prints, timeout_s=10.0) as s:
        result = s.score(PROMPTS[:1], FINE[:1])
    printed = capfd.readouterr()
    assert "noise" not in printed.out + printed.err
    error = result.errors["r"]
    assert "ValueError: after all that printing" in error
    assert "noise 49999" in error and "bytes in all" in error and len(error) < 10_000
    assert watch.survivors() == []


def test_the_trainers_secrets_are_not_in_the_workers_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_fake_token")
    monkeypatch.setenv("WANDB_API_KEY", "wandb_fake")
    monkeypatch.setenv("MY_SETTING", "plain")

    def looks(prompts, completions, **kw):
        child = subprocess.run(["env"], capture_output=True, text=True).stdout
        seen = [k for k in ("HF_TOKEN", "WANDB_API_KEY", "MY_SETTING") if k in os.environ]
        return [float(len(seen)) + (10.0 if "fake" in child else 0.0)]

    assert score_batch([RewardSpec("r", looks, isolation="process")], ["p"], ["c"]).raw["r"] == [1.0]
    passed = RewardSpec("r", looks, isolation="process", env_passthrough=("HF_TOKEN",))
    assert score_batch([passed], ["p"], ["c"]).raw["r"] == [12.0]  # HF_TOKEN and MY_SETTING, child sees it


def test_the_trainers_open_files_are_not_reachable(tmp_path):
    metrics = open(tmp_path / "metrics.jsonl", "w")
    fd = metrics.fileno()

    def writes(prompts, completions, **kw):
        os.write(fd, b"forged metrics\n")
        return [1.0 if os.readlink(f"/proc/self/fd/{fd}") == os.devnull else 0.0]

    try:
        result = score_batch([RewardSpec("r", writes, isolation="process")], ["p"], ["c"])
    finally:
        metrics.close()
    assert result.raw["r"] == [1.0]
    assert (tmp_path / "metrics.jsonl").read_text() == ""


@pytest.mark.parametrize("limits, code, expected", [
    (Limits(memory_mb=256), "bytearray(1 << 30)", "MemoryError"),
    (Limits(file_size_mb=1), "open(path, 'wb').write(b'x' * (2 << 20))", "File too large"),
])
def test_resource_limits_stop_the_function(tmp_path, limits, code, expected):
    path = tmp_path / "big"

    def greedy(prompts, completions, **kw):
        eval(code, {"path": path})
        return [1.0]

    with scorer(greedy, limits=limits, timeout_s=5.0) as s:
        result = s.score(["p"], ["c"])
        assert expected in result.errors["r"]
        assert s.score(["p"], ["c"]).failures["r"]["timeout"] == 0  # the next batch runs normally


def test_a_half_written_reply_costs_the_time_limit_not_a_hang(watch):
    """The function writes the start of a reply frame on the worker's socket, then sleeps."""
    def forges(prompts, completions, **kw):
        import socket
        import stat

        watch.note()
        if completions[0] == "b":
            fd = None
            for name in os.listdir("/proc/self/fd"):
                try:
                    fd = int(name) if stat.S_ISSOCK(os.fstat(int(name)).st_mode) else fd
                except OSError:
                    continue
            socket.socket(fileno=os.dup(fd)).sendall(b"\x00\x00\x01\x00{\"part\": {\"start\": 1, ")
            time.sleep(30)
        return [1.0]

    with scorer(forges, timeout_s=1.0) as s:  # had the caller waited for the sleep, "b" would be a broken frame
        result = s.score(PROMPTS, FINE)
    assert result.valid.tolist() == [True, False, False] and result.failures["r"]["timeout"] == 2
    assert watch.survivors() == []


def test_the_cpu_limit_is_armed_in_the_worker_before_each_batch(monkeypatch):
    """RLIMIT_CPU counts a process's whole life: before each batch the soft limit is moved to the
    CPU time used so far plus limits.cpu_s (the kernel's SIGXCPU itself is not re-tested here)."""
    import resource
    from types import SimpleNamespace

    from steadyrl.sandbox.limits import arm_cpu_limit

    def headroom(prompts, completions, **kw):
        used = resource.getrusage(resource.RUSAGE_SELF)
        return [resource.getrlimit(resource.RLIMIT_CPU)[0] - (used.ru_utime + used.ru_stime)]

    with scorer(headroom, limits=Limits(cpu_s=5), timeout_s=5.0) as s:
        assert 4.0 < s.score(["p"], ["c"]).raw["r"][0] <= 5.0

    calls = []  # the arithmetic, after 43.8 s of CPU time: a soft limit of 43 + 5 s
    monkeypatch.setattr(resource, "getrusage", lambda who: SimpleNamespace(ru_utime=41.7, ru_stime=2.1))
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (10, resource.RLIM_INFINITY))
    monkeypatch.setattr(resource, "setrlimit", lambda kind, value: calls.append((kind, value)))
    arm_cpu_limit(Limits(cpu_s=5))
    assert calls == [(resource.RLIMIT_CPU, (48, resource.RLIM_INFINITY))]


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STOPS_ITS_KEEPER = NOTE_SOURCE + '''
import os, signal, time

def stops_keeper(prompts, completions, folder):
    note(folder[0])
    if os.fork() == 0:  # a child that should die with the trainer
        note(folder[0])
        time.sleep(120)
    time.sleep(0.3)  # the child has noted itself
    os.kill(os.getppid(), signal.SIGSTOP)  # the old keeper: then nothing was left to kill the child
    time.sleep(120)
    return [1.0]
'''

TRAINER_THAT_DIES = '''
import os, signal, sys, time
from pathlib import Path
from steadyrl.rewards.loader import load_reward
from steadyrl.rewards.runners import make_runner

folder = Path(sys.argv[2])
runner = make_runner(load_reward(sys.argv[1] + ":stops_keeper"), "process")
runner.start(["p"], ["c"], {"folder": [str(folder)]})
deadline = time.monotonic() + 20
while len(list(folder.iterdir())) < 2 and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.5)  # the SIGSTOPs are sent
os.kill(os.getpid(), signal.SIGKILL)
'''


def test_a_reward_that_stops_its_keeper_still_dies_with_the_trainer(tmp_path, watch):
    """Issue 19 item 8: the reward SIGSTOPs its parent (the keeper, at 11aa87c), then the trainer
    is SIGKILLed: nothing the reward started may survive. (Only its parent: at 11aa87c a loop over
    /proc would stop every process of the machine.)"""
    (tmp_path / "stops.py").write_text(STOPS_ITS_KEEPER)
    (tmp_path / "trainer.py").write_text(TRAINER_THAT_DIES)
    env = {**os.environ, "PYTHONPATH": REPO}
    out = subprocess.run([sys.executable, str(tmp_path / "trainer.py"), str(tmp_path / "stops.py"),
                          str(watch.folder)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == -signal.SIGKILL, out.stderr
    assert len(watch.noted(at_least=2)) >= 2
    assert watch.survivors() == []


SIGNALS_THE_TRAINER = '''
import os, time

def signals_trainer(prompts, completions, trainer, sig):
    try:
        os.kill(int(trainer[0]), int(sig[0]))
        outcome = 0.0
    except OSError:
        outcome = 1.0  # no such process: the trainer's pid does not exist in here
    time.sleep(0.2)
    return [outcome]
'''

TRAINER_SIGNALLED = '''
import os, sys
from steadyrl.rewards import RewardScorer, RewardSpec
from steadyrl.rewards.loader import load_reward

spec = RewardSpec("r", load_reward(sys.argv[1] + ":signals_trainer"), isolation="process", timeout_s=20)
with RewardScorer([spec]) as scorer:
    result = scorer.score(["p"], ["c"], {"trainer": [str(os.getpid())], "sig": [sys.argv[2]]})
print("unharmed", result.raw["r"], flush=True)
'''


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_reward_cannot_signal_the_trainer_by_pid(tmp_path, sig):
    """Issue 25 item 5: the reward's pid namespace has no process with the trainer's pid."""
    (tmp_path / "signals.py").write_text(SIGNALS_THE_TRAINER)
    (tmp_path / "trainer.py").write_text(TRAINER_SIGNALLED)
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "trainer.py"), str(tmp_path / "signals.py"), str(int(sig))],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # stopped (at 11aa87c): wake it to end it
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "unharmed [1.0]" in out
