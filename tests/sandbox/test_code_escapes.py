"""What the red team reached from a ``code`` program at 11aa87c, through the real reward (a worker
process, the built-in with its default options): host Unix sockets, root's files, the training
data, System V IPC shared with a sibling and left behind, and limits that held per process but not
per sample. Each attack sits between two correct programs (:func:`run_attack`), so the correct
ones still score 1; the attack itself would score 1 where it got through, and scores 0 here.

Where bubblewrap is not installed (or cannot start) the reward falls back to its hand-written
namespaces, which do not build a file-system view but cover /tmp, /run, /home and the like: the
socket and data tests run on both, the other view tests are skipped there, and
``reward/code/isolation_level`` says what the machine gave (docs/rewards.md)."""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import socket
import tempfile
import threading

import pytest

from steadyrl.rewards import RewardScorer, RewardSpec, load_reward
from steadyrl.sandbox.view import bwrap_path

ADD = "a, b = map(int, open(0).read().split())\nprint(a + b)"
TESTS = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
OPTIONS = {"test_timeout_s": 2.0, "sample_timeout_s": 4.0, "workers": 3, "memory_mb": 256, "processes": 8,
           "max_output_kib": 64}
ROOT = os.getuid() == 0


def block(source: str) -> str:
    return f"```python\n{source}\n```"


def score(reward, sources: list[str], tests=TESTS) -> list:
    with RewardScorer([RewardSpec("code", reward, timeout_s=60)]) as scorer:
        return scorer.score(["p"] * len(sources), [block(s) for s in sources], {"tests": [tests] * len(sources)}).raw["code"]


def run_attack(reward, source: str, tests=TESTS) -> float:
    """The attack's score, between two correct programs (which must score 1)."""
    correct = ADD if tests is TESTS else f"print({tests['outputs'][0]!r}, end='')"
    first, attack, last = score(reward, [correct, source, correct], tests)
    assert first == 1.0 and last == 1.0
    return attack


@pytest.fixture(scope="module")
def reward():
    return load_reward("code", **OPTIONS)


@pytest.fixture(scope="module", params=["auto", "namespaces"])
def hiding(request, reward):
    """bubblewrap's view, and the fallback's namespaces, which cover /tmp (but the sample's own
    folder), /run, /home and the like with an empty tmpfs."""
    if request.param == "auto":
        if not getattr(reward, "view", True):
            pytest.skip("bubblewrap is not installed or cannot start here: no file-system view")
        return reward
    fallback = load_reward("code", **OPTIONS, sandbox="namespaces")
    if not fallback.isolation.get("readonly_fs"):
        pytest.skip("no mount namespace here")
    return fallback


@pytest.fixture
def in_view(reward):
    if not getattr(reward, "view", True):
        pytest.skip("bubblewrap is not installed or cannot start here: no file-system view")
    return reward


def _serve_answer(path: str) -> socket.socket:
    """A Unix socket at ``path`` (mode 0777) that tells whoever connects the answer."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(4)

    def answer():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"3\n")
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    return server


@pytest.mark.parametrize("where", ["a 0755 folder", "/tmp itself"])
def test_a_host_unix_socket_cannot_be_reached(hiding, where):
    folder = tempfile.mkdtemp()
    os.chmod(folder, 0o755)
    path = os.path.join(folder if where == "a 0755 folder" else "/tmp", f"steadyrl-{secrets.token_hex(4)}.sock")
    server = _serve_answer(path)
    try:
        source = (f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\n"
                  "print(s.recv(100).decode().strip())")
        assert run_attack(hiding, source) == 0.0
    finally:
        server.close()
        os.unlink(path)
        os.rmdir(folder)


def test_the_file_system_is_a_fresh_minimal_view(in_view):
    """Nothing of /root, /home, /run, /var or the host's /tmp; /etc without passwd or shadow."""
    marker = tempfile.NamedTemporaryFile(prefix="steadyrl-host-", dir="/tmp", delete=False)
    marker.close()
    os.chmod(marker.name, 0o644)
    wants = {"inputs": [""], "outputs": ["reached\n"]}
    probe = (f"import os\nhits = [p for p in ('/etc/shadow', '/etc/passwd', '/home', '/run', '/var', {marker.name!r})"
             " if os.path.exists(p)]\nprint('reached' if hits else 'nothing')")
    try:
        assert run_attack(in_view, probe, wants) == 0.0
        assert score(in_view, [probe.replace("'reached' if hits else 'nothing'", "'nothing' if not hits else hits")],
                     {"inputs": [""], "outputs": ["nothing\n"]}) == [1.0]
    finally:
        os.unlink(marker.name)


@pytest.mark.skipif(not ROOT, reason="the trainer is not root here: nothing of root's to protect")
def test_a_program_cannot_read_roots_files_even_with_an_interpreter_under_root(in_view):
    """The trainer's interpreter lives under /root (pyenv + venv here): 11aa87c stayed root for it."""
    secret = os.path.join("/root", f".steadyrl-test-{secrets.token_hex(4)}")
    with open(secret, "w") as f:
        f.write("3\n")
    os.chmod(secret, 0o600)
    try:
        for path in (secret, "/etc/shadow"):
            wants = {"inputs": [""], "outputs": ["3\n" if path == secret else "read\n"]}
            source = (f"try:\n    text = open({path!r}).read()\nexcept OSError:\n    text = ''\n"
                      f"print(text.strip() if {path!r} != '/etc/shadow' else ('read' if text else 'no'))")
            assert run_attack(in_view, source, wants) == 0.0
    finally:
        os.unlink(secret)
    assert in_view.isolation["user"] == "nobody" and in_view.metrics()["separate_user"] == 1.0
    uid = score(in_view, ["import os\nprint(os.getuid() != 0)"], {"inputs": [""], "outputs": ["True\n"]})
    assert uid == [1.0]


def test_a_program_cannot_read_the_training_data_to_find_its_answer(hiding):
    folder = tempfile.mkdtemp()
    os.chmod(folder, 0o755)
    data = os.path.join(folder, "train.jsonl")
    question = f"{secrets.token_hex(6)}\n"
    with open(data, "w") as f:
        f.write(json.dumps({"prompt": "?", "tests": {"inputs": [question], "outputs": ["the answer\n"]}}) + "\n")
    os.chmod(data, 0o644)
    tests = {"inputs": [question], "outputs": ["the answer\n"]}
    cheat = (f"import json\nq = open(0).read()\nfor line in open({data!r}):\n    row = json.loads(line)\n"
             "    if row['tests']['inputs'][0] == q:\n        print(row['tests']['outputs'][0], end='')")
    try:
        assert score(hiding, [cheat], tests) == [0.0]
    finally:
        os.unlink(data)
        os.rmdir(folder)


def _segments(key: int) -> list[str]:
    with open("/proc/sysvipc/shm") as f:
        return [line for line in f.read().splitlines()[1:] if int(line.split()[0]) == key]


def _remove_segment(key: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(key, 0, 0)
    if shmid >= 0:
        libc.shmctl(shmid, 0, None)  # IPC_RMID


SHM = ("import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmat.restype = ctypes.c_void_p\n"
       "shmid = libc.shmget({key}, 4096, 0o1666)\n")


@pytest.mark.parametrize("sandbox", ["auto", "namespaces"])
def test_system_v_shared_memory_is_neither_shared_with_a_sibling_nor_left_behind(sandbox):
    """A correct program leaves the answer in a System V segment; a later wrong one reads it
    (with bubblewrap and with the fallback's own IPC namespace)."""
    reward = load_reward("code", **OPTIONS, sandbox=sandbox) if sandbox != "auto" else load_reward("code", **OPTIONS)
    if not reward.isolation.get("ipc", True):
        pytest.skip("no IPC namespace here")
    key = int.from_bytes(secrets.token_bytes(3), "big") + 1
    writer = SHM.format(key=key) + ("addr = libc.shmat(shmid, None, 0)\nctypes.memmove(addr, b'3\\n\\0', 3)\n" + ADD)
    reader = SHM.format(key=key) + ("if shmid < 0:\n    print('none')\nelse:\n"
                                    "    print(ctypes.string_at(libc.shmat(shmid, None, 0)).decode().strip())")
    try:
        assert score(reward, [writer]) == [1.0]
        assert _segments(key) == []  # nothing of the sample outlives it
        assert run_attack(reward, reader) == 0.0
    finally:
        _remove_segment(key)


def test_a_samples_processes_share_one_memory_budget(reward):
    """Three processes each under memory_mb, together far over it: 11aa87c let them (7 GiB seen)."""
    if not getattr(reward, "cgroup", True):
        pytest.skip("cgroups are not delegated to this user: memory is limited per process only")
    small = load_reward("code", **{**OPTIONS, "memory_mb": 160, "test_timeout_s": 5.0, "sample_timeout_s": 8.0})
    source = ("import os, time\nkids = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
              "        b = bytearray(100 * 1024 * 1024)\n        for i in range(0, len(b), 4096):\n            b[i] = 1\n"
              "        time.sleep(1)\n        os._exit(0)\n    kids.append(pid)\nfor pid in kids:\n"
              "    os.waitpid(pid, 0)\n" + ADD)
    with RewardScorer([RewardSpec("code", small, timeout_s=60)]) as scorer:
        result = scorer.score(["p"], [block(source)], {"tests": [TESTS]})
    assert result.raw["code"] == [0.0] and result.metrics["reward/code/failures/memory"] == 1.0


def test_a_samples_files_share_one_disk_budget(in_view):
    """Twelve files of 1 MiB, each under file_size_mb (2), together over it."""
    capped = load_reward("code", **{**OPTIONS, "file_size_mb": 2})
    source = "for i in range(12):\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n" + ADD
    assert score(capped, [source]) == [0.0]
    assert score(capped, ["open('f', 'wb').write(b'x' * (1 << 20))\n" + ADD]) == [1.0]  # one file under the cap


def test_a_leftover_sample_cgroup_is_removed_by_a_later_sample():
    """A reward worker killed mid-sample (the scorer's time limit) cannot remove its samples'
    cgroups; the next sample's removes those that are old and empty."""
    from steadyrl.sandbox import cgroups

    if not cgroups.available():
        pytest.skip("cgroups are not delegated to this user")
    leftover = cgroups.create(f"{cgroups.PREFIX}leftover-{secrets.token_hex(4)}", memory_bytes=64 << 20, pids=8)
    for d in leftover.dirs:
        os.utime(d, (0, 0))
    cgroups._last_sweep.clear()
    fresh = cgroups.create(f"{cgroups.PREFIX}fresh-{secrets.token_hex(4)}", memory_bytes=64 << 20, pids=8)
    try:
        assert not any(os.path.exists(d) for d in leftover.dirs)
        assert all(os.path.isdir(d) for d in fresh.dirs)  # a young one is left alone
    finally:
        fresh.remove()
        leftover.remove()


def test_a_samples_processes_share_one_cpu_budget_where_the_cpu_controller_is_there():
    """Issue 25 item 1: CPU was RLIMIT_CPU per process, so N processes of one sample had N cores'
    worth. The sample's cgroup caps all its processes together at SAMPLE_CPUS cores, and the
    program is placed in it with the memory and pids groups (every ``procs_files`` entry)."""
    from steadyrl.sandbox import cgroups
    from steadyrl.sandbox.programs import _command

    if not cgroups.available():
        pytest.skip("cgroups are not delegated to this user")
    group = cgroups.create(f"{cgroups.PREFIX}cpu-{secrets.token_hex(4)}", memory_bytes=64 << 20, pids=8)
    try:
        if not group.cpu_limited:
            pytest.skip("the cpu controller is not writable here: CPU is limited per process only")
        quota = {}
        for d in group.dirs:
            for name in ("cpu.max", "cpu.cfs_quota_us"):
                if os.path.exists(os.path.join(d, name)):
                    quota[name] = open(os.path.join(d, name)).read().split()[0]
        assert quota in ({"cpu.max": str(int(cgroups.SAMPLE_CPUS * cgroups.CPU_PERIOD_US))},
                         {"cpu.cfs_quota_us": str(int(cgroups.SAMPLE_CPUS * cgroups.CPU_PERIOD_US))})
        command = _command({"network": False}, "/usr/bin/python3", False, group)
        assert all(path in command for path in group.procs_files)  # the harness joins the cpu group too
    finally:
        group.remove()
    assert not any(os.path.exists(d) for d in group.dirs)
