"""Hostile tools and environments through the agents the episode driver uses, in ``process``
isolation (sandbox workers): each attack comes back as an error the model is shown (a tool) or a
failed episode (an environment), the trainer (this test process) lives on, later calls work, and
no process the code started survives (``watch.survivors``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from transformers.utils import get_json_schema

from steadyrl.agents.environment import EnvironmentAgent
from steadyrl.agents.parsers import load_parser
from steadyrl.agents.toolagent import ToolAgent
from steadyrl.agents.tools import Tool

from .conftest import NOTE_SOURCE


def call(tool: str, **arguments) -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': tool, 'arguments': arguments})}\n</tool_call>"


def agent_with(fn, timeout_s: float = 1.5) -> ToolAgent:
    return ToolAgent([Tool(fn.__name__, fn, get_json_schema(fn))], load_parser("hermes"), timeout_s=timeout_s,
                     isolation="process", workers=2)


def test_a_tool_cannot_kill_the_trainer_and_the_next_call_works(watch):
    def attack(how: str) -> str:
        """Attack the parent.

        Args:
            how: kill, term or exit
        """
        watch.note()
        if how == "exit":
            os._exit(3)
        os.kill(os.getppid(), signal.SIGKILL if how == "kill" else signal.SIGTERM)
        time.sleep(0.5)
        return "still here"

    agent = agent_with(attack)
    try:
        replies = agent.respond([None] * 3, [call("attack", how=h) for h in ("kill", "term", "exit")])
        assert all(not r.done for r in replies)  # each episode goes on, with the result as an observation
        exit_reply = replies[2].messages[0]["content"]
        assert exit_reply.startswith("Error") and replies[2].tool_errors == {"attack": 1}
        again = agent.respond([None], [call("attack", how="term")])  # a fresh worker serves the next call
        assert again[0].messages[0]["role"] == "tool"
    finally:
        agent.shutdown()
    assert watch.survivors() == []


def test_a_tool_does_not_see_the_trainers_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("MY_SERVICE_API_KEY", "sk-secret")

    def peek(name: str) -> str:
        """Read an environment variable.

        Args:
            name: the variable
        """
        return os.environ.get(name, "absent")

    agent = agent_with(peek)
    try:
        replies = agent.respond([None, None], [call("peek", name="HF_TOKEN"), call("peek", name="MY_SERVICE_API_KEY")])
    finally:
        agent.shutdown()
    assert [r.messages[0]["content"] for r in replies] == ["absent", "absent"]


def test_a_tool_that_hangs_and_leaves_busy_children_is_killed_with_them(watch):
    def spawn(seconds: float) -> str:
        """Start busy processes and wait.

        Args:
            seconds: how long to wait
        """
        watch.note()
        code = f"{NOTE_SOURCE}\nnote({str(watch.folder)!r})\nimport time; time.sleep(60)"
        subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        time.sleep(seconds)
        return "done"

    agent = agent_with(spawn, timeout_s=1.0)
    try:
        replies = agent.respond([None], [call("spawn", seconds=30)])
        assert "timed out" in replies[0].messages[0]["content"] or "time" in replies[0].messages[0]["content"]
        assert replies[0].tool_errors == {"spawn": 1}
    finally:
        agent.shutdown()
    assert len(watch.noted(at_least=2)) >= 2  # the tool and the child it started in a new session
    assert watch.survivors() == []


class Counter:
    """Its state lives in the sandbox worker between steps; 'boom' crashes the worker."""

    def reset(self, prompt, **row):
        self.n = 0
        return None

    def step(self, text):
        self.n += 1
        if text == "boom":
            os._exit(7)
        if text == "raise":
            raise RuntimeError("the game broke")
        return f"count {self.n}", float(self.n), False


def test_environments_keep_state_in_their_worker_and_fail_alone():
    agent = EnvironmentAgent(Counter, observation_role="user", timeout_s=5.0, isolation="process")
    try:
        starts = agent.start([{"prompt": "p"}] * 3, [1, 2, 3])
        states = [s.state for s in starts]
        assert not any(s.failed for s in starts)
        first = agent.respond(states, ["a", "a", "a"])
        second = agent.respond(states, ["a", "boom", "raise"])
        assert [r.reward for r in first] == [1.0, 1.0, 1.0]
        assert second[0].reward == 2.0 and second[0].messages == [{"role": "user", "content": "count 2"}]
        assert second[1].failed and second[2].failed and "the game broke" in second[2].error
        agent.close(states)
        again = agent.start([{"prompt": "p"}], [4])  # a crashed worker is replaced for the next episode
        assert agent.respond([again[0].state], ["a"])[0].reward == 1.0
    finally:
        agent.shutdown()


def test_a_deeply_nested_tool_call_is_one_malformed_call_and_the_run_goes_on():
    """Issue 19 item 10: 500 nested JSON arrays (a degenerate repetition loop) made pickling the
    request raise RecursionError out of the rollout at 11aa87c."""
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first addend
            b: the second addend
        """
        return a + b

    agent = agent_with(add)
    deep = "[" * 500 + "]" * 500
    try:
        replies = agent.respond([None, None], [
            f'<tool_call>\n{{"name": "add", "arguments": {{"a": {deep}, "b": 1}}}}\n</tool_call>',
            call("add", a=2, b=3)])
        assert replies[0].tool_errors == {"parse": 1} and not replies[0].done
        assert "nested more than" in replies[0].messages[0]["content"]
        assert replies[1].messages[0]["content"] == "5" and replies[1].tool_errors == {}
        assert agent.respond([None], [call("add", a=1, b=1)])[0].messages[0]["content"] == "2"
    finally:
        agent.shutdown()


SNOOP_TOOL = '''
import gc, hashlib, json, os

PREFIX = b"sk-steadyrl-test-"

def _hits(data, digest):
    found, start = False, data.find(PREFIX)
    while start >= 0:
        if hashlib.sha256(data[start:start + len(PREFIX) + 24]).hexdigest() == digest:
            found = True
        start = data.find(PREFIX, start + 1)
    return found

def _memory(digest):
    with open("/proc/self/maps") as maps:
        regions = [line.split() for line in maps]
    with open("/proc/self/mem", "rb", buffering=0) as mem:
        for fields in regions:
            if not fields[1].startswith("rw"):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            for at in range(lo, hi, 1 << 22):
                try:
                    mem.seek(at)
                    if _hits(mem.read(min(1 << 22, hi - at) + 64), digest):
                        return True
                except (OSError, ValueError, OverflowError):
                    break
    return False

def _environs(digest):
    places = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if _hits(f.read(), digest):
                    places.append(name)
        except OSError:
            continue
    return places

def snoop(digest: str) -> str:
    """Look for a secret everywhere this process can read.

    Args:
        digest: the sha256 of the secret
    """
    found = []
    if any(_hits(v.encode(), digest) for v in os.environ.values()):
        found.append("os.environ")
    if any(isinstance(o, dict) and any(isinstance(v, str) and _hits(v.encode(), digest) for v in o.values())
           for o in gc.get_objects()):
        found.append("gc objects")
    if _environs(digest):
        found.append("/proc/*/environ")
    if _memory(digest):
        found.append("/proc/self/mem")
    return json.dumps(found)
'''

JUDGE = '''
def judge(prompts, completions, api_key):
    return [1.0] * len(completions)
'''


def test_a_tool_finds_no_secret_of_another_reward_in_its_memory(tmp_path, monkeypatch):
    """Issue 19 item 9: a worker forked from the trainer held the resolved {env: NAME} option of
    another reward (here the judge's key, under a name no credential pattern matches) in its heap,
    its environment and /proc/<trainer>/environ."""
    import hashlib
    import secrets as token

    from steadyrl.agents.tools import load_tools
    from steadyrl.rewards.loader import load_reward

    secret = "sk-steadyrl-test-" + token.token_hex(12)
    monkeypatch.setenv("JUDGE_PASS_PHRASE", secret)
    (tmp_path / "judge.py").write_text(JUDGE)
    (tmp_path / "snoop.py").write_text(SNOOP_TOOL)
    judge = load_reward(f"{tmp_path / 'judge.py'}:judge", api_key={"env": "JUDGE_PASS_PHRASE"})
    assert judge.keywords["api_key"].reveal() == secret  # the trainer holds it (wrapped: its repr is redacted)
    agent = ToolAgent(load_tools([f"{tmp_path / 'snoop.py'}:snoop"]), load_parser("hermes"), timeout_s=30,
                      isolation="process", workers=1)
    try:
        reply = agent.respond([None], [call("snoop", digest=hashlib.sha256(secret.encode()).hexdigest())])[0]
    finally:
        agent.shutdown()
    assert reply.tool_errors == {}, reply.messages
    assert reply.messages[0]["content"] == "[]"
