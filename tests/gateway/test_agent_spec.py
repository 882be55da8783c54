"""What the gateway makes of a sampled row (stop sequences, tool calls), how an agent function is
checked before any model loads, how its rewards are scored, and that eval counts it as code."""

from __future__ import annotations

import json

import pytest
import torch

from steadyrl.agents.parsers import load_parser
from steadyrl.errors import ConfigError
from steadyrl.gateway import load_agent
from steadyrl.gateway.sampled import choice_of
from steadyrl.rollout.base import EpisodeInfo, Generation


def generation(tokenizer, text: str, end: bool = True) -> Generation:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if end else [])
    row = torch.tensor([ids])
    return Generation(prompt_ids=torch.tensor([[1]]), prompt_mask=torch.tensor([[1]]), response_ids=row,
                      response_mask=torch.ones_like(row), truncated=torch.tensor([not end]), completions=[text],
                      rollout_logprobs=torch.full(row.shape, -0.5))


def test_a_tool_call_in_the_sampled_text_becomes_openai_tool_calls(tiny):
    _, tokenizer = tiny
    text = 'sure <tool_call>\n{"name": "calculate", "arguments": {"expression": "1+2"}}\n</tool_call>'
    choice, end = choice_of(tokenizer, generation(tokenizer, text), 0, limit=100, eos={tokenizer.eos_token_id},
                            stops=[], parser=load_parser("hermes"))
    assert choice.finish_reason == "tool_calls" and end == tokenizer.eos_token
    (call,) = choice.tool_calls
    assert call["type"] == "function" and call["function"]["name"] == "calculate"
    assert json.loads(call["function"]["arguments"]) == {"expression": "1+2"}
    assert choice.content.strip() == "sure" and choice.ids[-1] == tokenizer.eos_token_id  # the end token was sampled


def test_a_stop_sequence_cuts_the_text_before_it_and_the_ids_after_the_token_completing_it(tiny):
    _, tokenizer = tiny
    choice, end = choice_of(tokenizer, generation(tokenizer, "What is 12*34?"), 0, limit=100,
                            eos={tokenizer.eos_token_id}, stops=["*3"], parser=None)
    assert choice.text == "What is 12" and choice.finish_reason == "stop" and end is None
    assert "*3" in tokenizer.decode(choice.ids) and "*3" not in tokenizer.decode(choice.ids[:-1])
    assert len(choice.logprobs) == len(choice.ids)


def test_max_tokens_cuts_a_choice_and_marks_it_length(tiny):
    _, tokenizer = tiny
    choice, end = choice_of(tokenizer, generation(tokenizer, "What is 12*34?"), 0, limit=3,
                            eos={tokenizer.eos_token_id}, stops=[], parser=None)
    assert len(choice.ids) == 3 and choice.finish_reason == "length" and end is None


@pytest.mark.parametrize("source, expected", [
    ("def run_episode(row):\n    return 1.0\n", "neither 'client' nor 'base_url'"),
    ("def run_episode(row, client, budget):\n    return 1.0\n", "requires ['budget']"),
    ("def run_episode():\n    return 1.0\n", "takes no data row"),
    ("run_episode = 3\n", "not a function"),
    ("class run_episode:\n    pass\n", "not a function"),
    ("def other(row, client):\n    pass\n", "has no attribute 'run_episode'"),
])
def test_an_agent_with_the_wrong_signature_is_refused_naming_rollout_agent(agent_file, source, expected):
    with pytest.raises(ConfigError, match="rollout.multi_turn.agent") as err:
        load_agent(agent_file(source))
    assert expected in str(err.value)


def test_agents_take_a_client_or_a_base_url_and_key(agent_file):
    assert load_agent(agent_file("async def run_episode(row, client):\n    return None\n"))[1:] == (True, "client")
    assert load_agent(agent_file("def run_episode(row, base_url, api_key, extra=1):\n    pass\n"))[1:] == (False, "url")
    assert load_agent(agent_file("def run_episode(row, **kw):\n    pass\n"))[2] == "client"


def _episode(**kw) -> EpisodeInfo:
    info = EpisodeInfo(gateway=True, **kw)
    return info


def test_the_agents_reward_is_the_score_and_none_leaves_it_to_the_reward_functions():
    from steadyrl.rewards.scorer import _with_agent
    from steadyrl.rewards.scoring import ScoreResult

    episodes = [_episode(agent_reward=1.0), _episode(), _episode(failed=True, error="boom")]
    functions = ScoreResult(names=["f"], weights={"f": 1.0}, raw={"f": [0.25, 0.5, 0.75]},
                            scores=torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64),
                            valid=torch.ones(3, dtype=torch.bool), failures={"f": {}})
    result = _with_agent(functions, episodes)
    assert result.valid.tolist() == [True, True, False] and result.scores.tolist() == [1.25, 0.5, 0.0]
    assert result.raw["agent"] == [1.0, None, None] and result.errors["agent"] == "boom"
    alone = ScoreResult(names=[], weights={}, raw={}, scores=torch.zeros(3, dtype=torch.float64),
                        valid=torch.ones(3, dtype=torch.bool), failures={})
    result = _with_agent(alone, episodes)
    assert result.valid.tolist() == [True, False, False] and result.failures["agent"]["none"] == 1
    from steadyrl.rewards import reward_metrics

    assert reward_metrics(result)["reward/agent/mean"] == 1.0


def test_eval_of_a_run_directory_counts_its_agent_as_code_to_trust():
    from steadyrl.config import load_config
    from steadyrl.run.trust import run_code

    config = load_config(None, ["demo.task=tool", "rollout.multi_turn.tools=[]", "rollout.multi_turn.agent=agent.py:run_episode"])
    assert "agent 'agent.py:run_episode'" in run_code(config, {"rollout": {"multi_turn": {"agent": "agent.py:run_episode"}}})
    assert run_code(config, {"rollout": {}}) == []  # given on the evaluator's own command line


def test_an_agent_with_tools_or_an_environment_is_refused():
    from steadyrl.config import load_config

    with pytest.raises(ConfigError, match="rollout.multi_turn.agent"):
        load_config(None, ["demo.task=tool", "rollout.multi_turn.agent=agent.py:run_episode"])  # the demo's rollout.multi_turn.tools
