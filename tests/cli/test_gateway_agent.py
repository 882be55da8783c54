"""``steadyrl train`` with ``rollout.multi_turn.agent``: the tool demo's calculator episode written as an
OpenAI-client agent trains end to end through the gateway; a wrong agent exits 2 before any model."""

from __future__ import annotations

import json

import pytest

from .conftest import REPO

FAST = ("demo.tool_skill_steps=4", "demo.warmstart_steps=2", "demo.num_train=64", "demo.num_eval=4",
        "demo.hidden_size=32", "rollout.prompts_per_step=2", "rollout.group_size=2", "trainer.max_steps=2")
AGENT = f"rollout.multi_turn.agent={REPO / 'examples' / 'calculator_agent.py'}:run_episode"


def test_tool_demo_trains_through_the_gateway_with_an_openai_client_agent(steadyrl_cli, tmp_path):
    pytest.importorskip("openai")
    out = tmp_path / "run"
    proc = steadyrl_cli("train", "demo.task=tool", "rollout.multi_turn.tools=[]", AGENT, "--output-dir", str(out), *FAST,
                        timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/agent/calls" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # every episode made at least its first call, none failed, the demo's reward scored them
        assert r["rollout/agent/calls"] >= 4 and r["rollout/failed_episodes"] == 0 and r["reward/valid_frac"] == 1.0
        assert "reward/answer/mean" in r
    assert "held-out transcript after RL:" in proc.stdout


def test_an_agent_with_the_wrong_signature_exits_2_before_any_model_is_built(steadyrl_cli, tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text("def run_episode(row):\n    return 1.0\n")
    proc = steadyrl_cli("train", "demo.task=tool", "rollout.multi_turn.tools=[]", f"rollout.multi_turn.agent={agent}:run_episode",
                        "--output-dir", str(tmp_path / "run"), *FAST, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "rollout.multi_turn.agent" in proc.stderr and "neither 'client' nor 'base_url'" in proc.stderr
    assert "warm-start" not in proc.stdout  # the demo's model was never built


REWRITING_AGENT = '''
import json
import urllib.request


def _chat(base_url, api_key, messages):
    body = json.dumps({"messages": messages, "max_tokens": 8}).encode()
    request = urllib.request.Request(base_url + "/chat/completions", data=body, headers={
        "Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())["choices"][0]["message"]["content"] or ""


def run_episode(row, base_url, api_key):
    first = _chat(base_url, api_key, list(row["prompt"]))
    again = _chat(base_url, api_key, [{"role": "user", "content": "Say it again: " + first[:12]}])
    return float(len(first + again) % 2)  # a reward that varies within a group
'''


def test_an_agent_that_rewrites_its_history_trains_both_trajectories_end_to_end(steadyrl_cli, tmp_path):
    agent = tmp_path / "rewriting_agent.py"
    agent.write_text(REWRITING_AGENT)
    out = tmp_path / "run"
    proc = steadyrl_cli("train", "demo.task=tool", "rollout.multi_turn.tools=[]", f"rollout.multi_turn.agent={agent}:run_episode",
                        "--output-dir", str(out), *FAST, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/agent/calls" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # every episode: one rewrite; its two trajectories trained (twice the samples' tokens)
        assert r["rollout/agent/non_append_calls"] == 4.0 and r["rollout/failed_episodes"] == 0  # 2 x 2 episodes
        assert r["reward/valid_frac"] == 1.0 and r["actor/grad_norm"] == r["actor/grad_norm"]  # finite, not NaN
