"""Sandbox, the generic API: JSON replies, streamed parts, state between calls, errors, broken or
half-written replies, captured output, the trainer's death."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from steadyrl.sandbox import Limits, Sandbox
from .conftest import NOTE_SOURCE

REPO = Path(__file__).resolve().parents[2]


class Counter:
    def __init__(self):
        self.n = 0

    def __call__(self, request):
        self.n += request["add"]
        return {"n": self.n, "pid": os.getpid()}


def test_a_call_returns_json_data_and_the_target_keeps_its_state_between_calls():
    counter = Counter()
    with Sandbox(counter) as box:
        first = box.call({"add": 2}, timeout_s=5)
        second = box.call({"add": 3}, timeout_s=5)
    assert first.status == "ok" and first.value["n"] == 2 and second.value["n"] == 5
    assert first.value["pid"] == second.value["pid"] != os.getpid()  # one persistent worker
    assert counter.n == 0  # the state lives in the worker


def test_a_generator_streams_parts_and_a_timeout_keeps_those_already_sent():
    def steps(request):
        for i in range(request):
            if i == 2:
                time.sleep(30)
            yield {"step": i, "text": f"line {i}"}

    with Sandbox(steps) as box:
        done = box.call(2, timeout_s=5)
        cut = box.call(5, timeout_s=0.5)  # "timed out after 0.5 s": the limit fired, not the 30 s sleep's end
        again = box.call(1, timeout_s=5)  # a fresh worker after the time-out
    assert done.status == "ok" and done.parts == [{"step": 0, "text": "line 0"}, {"step": 1, "text": "line 1"}]
    assert cut.status == "timeout" and [p["step"] for p in cut.parts] == [0, 1]
    assert "timed out after 0.5 s" in cut.error
    assert again.status == "ok" and again.parts == [{"step": 0, "text": "line 0"}]


def test_an_exception_is_an_error_reply_with_its_traceback_and_the_worker_lives_on():
    def target(request):
        if request == "raise":
            print("about to fail")
            raise ValueError("no such tool")
        if request == "exit":
            sys.exit(3)
        return os.getpid()

    with Sandbox(target) as box:
        pid = box.call("pid", timeout_s=5).value
        failed = box.call("raise", timeout_s=5)
        exited = box.call("exit", timeout_s=5)
        assert box.call("pid", timeout_s=5).value == pid
    assert failed.status == "error" and "ValueError: no such tool" in failed.error
    assert "in target" in failed.error and failed.output == "about to fail\n"
    assert exited.status == "error" and "SystemExit: 3" in exited.error


def test_a_value_that_is_not_json_data_is_an_error():
    with Sandbox(lambda request: {1, 2}) as box:
        reply = box.call(None, timeout_s=5)
    assert reply.status == "error" and "the reply is not JSON data" in reply.error


def _socket_fd() -> int:
    """In the worker: the descriptor of its socket to the trainer."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                return fd
        except OSError:
            continue
    raise RuntimeError("no socket")


@pytest.mark.parametrize("raw, status, message", [
    (b"\x00\x00\x10\x00{\"part\": ", "timeout", "timed out after 1 s"),  # half a frame, then silence
    (b"\xff\xff\xff\xff", "died", "over the limit"),  # a length prefix of 4 GiB
    (b"\x00\x00\x00\x05\x80\x04K\x01.", "died", "not JSON"),  # a pickle: never unpickled
    (b"\x00\x00\x00\x02[]", "died", "expected an object"),
])
def test_a_broken_or_half_written_reply_never_hangs_the_trainer(raw, status, message):
    def writes_raw(request):
        sock = socket.socket(fileno=os.dup(_socket_fd()))
        sock.sendall(raw)
        time.sleep(30)

    with Sandbox(writes_raw) as box:
        reply = box.call(None, timeout_s=1)  # the status and message say which mechanism ended it
        assert box.call(None, timeout_s=0.3).status in (status, "timeout")  # a fresh worker, same target
    assert reply.status == status and message in reply.error


def test_output_is_captured_in_a_bounded_tail_and_quoted_when_the_worker_dies(capfd):
    def chatty(request):
        for i in range(20_000):
            print(f"line {i:05d} " + "x" * 100)
        os._exit(9)

    with Sandbox(chatty, limits=Limits(output_kib=4)) as box:
        reply = box.call(None, timeout_s=10)
    assert reply.status == "died" and "exit status 9" in reply.error
    assert "line 19999" in reply.error and "line 00000" not in reply.error
    assert len(reply.output) <= 4096 and reply.output_bytes > 2_000_000
    assert f"of {reply.output_bytes:,} bytes in all" in reply.error
    printed = capfd.readouterr()
    assert "line 0" not in printed.out + printed.err  # nothing reached the trainer's output


TRAINER = """
import os, signal, subprocess, sys, time
from pathlib import Path
from steadyrl.sandbox import Sandbox

folder = Path(sys.argv[1])

def note():
    _note(folder)

def spawns(request):
    note()
    if os.fork() == 0:  # a child that leaves the session and spins
        os.setsid(); note()
        while True:
            pass
    if os.fork() == 0:  # a double fork: the grandchild is orphaned at once
        if os.fork() == 0:
            note(); time.sleep(60)
        os._exit(0)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    time.sleep(60)

box = Sandbox(spawns)
call = box.submit(None)
while len(list(folder.iterdir())) < 3:
    time.sleep(0.01)
time.sleep(0.2)
print(box.pid, box.tag, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the trainer dies without cleaning up
"""


def test_nothing_survives_the_trainers_death(tmp_path, watch):
    script = tmp_path / "trainer.py"
    script.write_text(NOTE_SOURCE.replace("def note(", "def _note(") + textwrap.dedent(TRAINER))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, str(script), str(watch.folder)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL, out.stderr
    keeper, tag = out.stdout.split()
    (watch.folder / keeper).write_text(tag)  # the keeper must be gone too
    assert len(watch.noted()) >= 4
    assert watch.survivors() == []


def test_credentials_are_removed_even_from_the_environment_the_kernel_shows(tmp_path):
    """``/proc/self/environ`` shows a process's environment as it was at exec: the trainer's
    secrets are there unless the worker blanks its copy."""
    code = textwrap.dedent("""
        import os, subprocess
        from steadyrl.sandbox import Sandbox

        def look(request):
            with open("/proc/self/environ", "rb") as f:
                block = f.read()
            child = subprocess.run(["env"], capture_output=True, text=True).stdout
            return {"environ": "HF_TOKEN" in os.environ, "block": b"hf_fake" in block,
                    "child": "hf_fake" in child, "keeps": os.environ.get("SAFE_VAR"),
                    "passed": os.environ.get("WANDB_API_KEY")}

        print(Sandbox(look).call(None, 10).value)
        print(Sandbox(look, env_passthrough=["WANDB_*"]).call(None, 10).value)
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_TOKEN": "hf_fake", "WANDB_API_KEY": "wb_fake",
           "SAFE_VAR": "kept"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    default, passthrough = out.stdout.splitlines()
    assert default == "{'environ': False, 'block': False, 'child': False, 'keeps': 'kept', 'passed': None}"
    assert passthrough.endswith("'passed': 'wb_fake'}")


class GuessEnv:
    """A toy environment: guess the number."""

    def reset(self, seed):
        self.secret, self.tries = seed % 10, 0
        return "guess a digit"

    def step(self, action):
        self.tries += 1
        done = int(action) == self.secret
        return ("right" if done else "wrong"), float(done), done


class EnvServer:  # the pattern of the package docstring
    def __init__(self, make_env):
        self.make_env, self.env = make_env, None

    def __call__(self, request):
        method, args = request
        if method == "reset":
            self.env = self.make_env()
            return {"observation": self.env.reset(**args)}
        obs, reward, done = self.env.step(args["action"])
        return {"observation": obs, "reward": reward, "done": done}


def test_an_environment_lives_in_its_worker_across_an_episodes_steps():
    with Sandbox(EnvServer(GuessEnv)) as box:
        assert box.call(("reset", {"seed": 13}), timeout_s=5).value == {"observation": "guess a digit"}
        wrong = box.call(("step", {"action": "1"}), timeout_s=5).value
        right = box.call(("step", {"action": "3"}), timeout_s=5).value
        broken = box.call(("step", {"action": "x"}), timeout_s=5)
    assert wrong == {"observation": "wrong", "reward": 0.0, "done": False}
    assert right == {"observation": "right", "reward": 1.0, "done": True}
    assert broken.status == "error" and "ValueError" in broken.error


def test_a_tool_call_returns_text():
    tools = {"upper": lambda text: text.upper(), "count": lambda text, char: text.count(char)}
    with Sandbox(lambda req: tools[req["name"]](**req["arguments"])) as box:
        assert box.call({"name": "upper", "arguments": {"text": "héllo"}}, timeout_s=5).value == "HÉLLO"
        assert box.call({"name": "count", "arguments": {"text": "banana", "char": "a"}}, timeout_s=5).value == 3
