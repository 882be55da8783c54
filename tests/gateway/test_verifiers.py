"""A verifiers environment (0.1.x API) rolled out through the gateway, scored by its own rubric.
Skipped where verifiers is not installed (it is not in the dev extras: see docs/environments.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .conftest import make_prompts

vf = pytest.importorskip("verifiers")
if not hasattr(vf, "SingleTurnEnv"):
    pytest.skip("verifiers >= 0.2 has another API (verifiers.v1); the example uses 0.1.x", allow_module_level=True)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verifiers_agent.py"


def test_a_verifiers_environment_runs_through_the_gateway_and_its_rubric_is_the_reward(engine, tiny):
    from steadyrl.agents.parsers import load_parser
    from steadyrl.gateway import GatewayAgent
    from steadyrl.rollout.episodes import TurnLimits

    _, tokenizer = tiny
    prompts = make_prompts(tokenizer, ["What is 2*3?", "What is 4*5?"])
    for p, answer in zip(prompts, ["6", "20"]):
        p.columns["answer"] = answer
    agent = GatewayAgent(f"{EXAMPLE}:run_episode", parser=load_parser("hermes"), concurrency=8, timeout_s=120)
    torch.manual_seed(0)
    try:
        gen = agent.rollout(engine, tokenizer, prompts, 2, TurnLimits(8, 16, 64, "right", 200),
                            temperature=1.0, top_p=1.0, top_k=0)
    finally:
        agent.shutdown()
    assert [e.failed for e in gen.episodes] == [False] * 4, [e.error for e in gen.episodes]
    assert all(e.agent_calls == 1 and e.agent_reward in (0.0, 1.0) for e in gen.episodes)
    rows = gen.response_mask.sum(-1).tolist()  # the environment's one call is the trained sample
    assert all(r >= 1 for r in rows) and all(e.non_append_calls == 0 for e in gen.episodes)
