"""A tool call whose arguments are not JSON (``[calculate(expression={1, 2})]`` reads into a set)
never ends a gateway run: the parsers return no such call (an error line instead, by rule), and
the gateway answers a call it cannot write as JSON with the text as content."""

from __future__ import annotations

import json

import pytest
import torch

from steadyrl.agents.parsers import ParsedTurn, ToolCall, load_parser
from steadyrl.gateway import GatewayAgent
from steadyrl.rollout.base import Generation, response_mask_from_ids
from steadyrl.rollout.episodes import TurnLimits

from .conftest import make_prompts

SET_CALL = "[calculate(expression={1, 2})]"

AGENT = '''
import json, urllib.request
SEEN = []
TOOLS = [{"type": "function", "function": {"name": "calculate", "description": "evaluate",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]

def run_episode(row, base_url, api_key):
    body = {"messages": list(row["prompt"]), "max_tokens": 32, "tools": TOOLS}
    request = urllib.request.Request(base_url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + api_key, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        SEEN.append(json.loads(response.read()))
    return 1.0
'''


class SaysEngine:
    """``generate`` answers every context with ``text`` and the end-of-turn token."""

    def __init__(self, tokenizer, text: str):
        self.tokenizer, self.text = tokenizer, text
        self.eos_ids = [tokenizer.eos_token_id]

    def generate(self, prompt_ids, n, *, max_new_tokens, **sampling):
        contexts = [p for p in prompt_ids for _ in range(n)]
        out = (self.tokenizer(self.text, add_special_tokens=False)["input_ids"] + self.eos_ids)[:max_new_tokens]
        response = torch.tensor([out] * len(contexts))
        mask, truncated = response_mask_from_ids(response, self.eos_ids, max_new_tokens)
        width = max(len(c) for c in contexts)
        pad = self.tokenizer.pad_token_id
        return Generation(prompt_ids=torch.tensor([[pad] * (width - len(c)) + c for c in contexts]),
                          prompt_mask=torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts]),
                          response_ids=response, response_mask=mask, truncated=truncated,
                          completions=[self.text] * len(contexts))


def set_parser(text: str) -> ParsedTurn:
    """A parser of the user's own that does not keep the rule: its call's arguments are a set."""
    return ParsedTurn(content="", calls=[ToolCall("calculate", {"expression": {1, 2}})])


def run(tiny, agent_file, parser):
    import sys

    _, tokenizer = tiny
    spec = agent_file(AGENT)
    agent = GatewayAgent(spec, parser=parser, concurrency=4, timeout_s=60, wave_wait_s=0.05)
    limits = TurnLimits(max_turns=2, max_new_tokens=32, max_observation_tokens=32, observation_truncation="right",
                        episode_tokens=200)
    try:
        gen = agent.rollout(SaysEngine(tokenizer, SET_CALL), tokenizer, make_prompts(tokenizer, ["add 1 and 2"]), 1,
                            limits, temperature=1.0, top_p=1.0, top_k=0)
    finally:
        agent.shutdown()
    module = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == spec.rsplit(":", 1)[0])
    return gen, module.SEEN


@pytest.mark.parametrize("parser", [load_parser("pythonic"), load_parser("auto"), set_parser],
                         ids=["pythonic", "auto", "a user parser returning a set"])
def test_a_call_with_arguments_that_are_not_json_is_answered_as_content_and_the_run_goes_on(tiny, agent_file, parser):
    gen, seen = run(tiny, agent_file, parser)
    (answer,) = seen
    message = answer["choices"][0]["message"]
    assert not message.get("tool_calls") and answer["choices"][0]["finish_reason"] == "stop"
    assert SET_CALL in message["content"]
    assert gen.response_ids.shape[0] == 1 and float(gen.response_mask.sum()) > 0  # the episode was trained


@pytest.mark.parametrize("name", ["pythonic", "auto"])
def test_the_parsers_give_an_error_line_not_a_set(name):
    turn = load_parser(name)(SET_CALL)
    assert turn.calls == [] and len(turn.errors) == 1
    assert "not JSON" in turn.errors[0] and "calculate" in turn.errors[0]


@pytest.mark.parametrize("text", ["[f(a=b'x')]", "[f(a=1j)]", "[f(a=...)]", "[f(a={(1, 2): 3})]"])
def test_no_python_only_value_comes_out_of_the_pythonic_parser(text):
    turn = load_parser("pythonic")(text)
    assert turn.calls == [] and "not JSON" in turn.errors[0]
    for call in load_parser("auto")(text).calls:
        json.dumps(call.arguments)


def test_a_user_parser_breaking_the_rule_is_held_to_it_when_loaded(tmp_path):
    path = tmp_path / "p.py"
    path.write_text("from steadyrl.agents.parsers import ParsedTurn, ToolCall\n"
                    "def parse(text):\n    return ParsedTurn('', [ToolCall('f', {'a': {1}}), ToolCall('g', {})])\n")
    turn = load_parser(f"{path}:parse")("x")
    assert turn.calls == [ToolCall("g", {})] and "not JSON" in turn.errors[0]
