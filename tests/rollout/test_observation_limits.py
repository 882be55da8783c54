"""``rollout.multi_turn.max_observation_tokens``: contents are shortened, the chat template's own tokens never cut.

An observation longer than the limit keeps its template structure (headers, end tokens, the next
generation prompt) and loses content only, so the episode's tokens stay exactly the template's
rendering of its transcript, also where the rendering takes more tokens than the content (Llama's
``tojson`` escapes every quote and newline). Messages whose empty rendering alone exceeds the
limit end the episode, truncated by ``max_observation_tokens``, with nothing appended.
"""

import pytest
from transformers.utils import get_json_schema

from steadyrl.agents.parsers import load_parser
from steadyrl.agents.toolagent import ToolAgent
from steadyrl.agents.tools import Tool
from steadyrl.rollout.episodes import TurnLimits, episode_metrics, run_episodes
from agents.templates import llama31, qwen25
from rollout.test_episodes import LIMITS, LLAMA_HEADER, QWEN_HEADER, ScriptedEngine, prompts_for


def shout(text: str) -> str:
    """Repeat a text.

    Args:
        text: what to repeat
    """
    return text * 300


def shout_agent(parser: str) -> ToolAgent:
    return ToolAgent([Tool("shout", shout, get_json_schema(shout))], load_parser(parser), timeout_s=5,
                     isolation="inline")


HERMES = '<tool_call>\n{"name": "shout", "arguments": {"text": "a\\"b\\n"}}\n</tool_call>'
LLAMA = '{"name": "shout", "parameters": {"text": "a\\"b\\n"}}'


def sequence(gen, row: int) -> list[int]:
    return (gen.prompt_ids[row][gen.prompt_mask[row].bool()].tolist()
            + gen.response_ids[row][gen.response_mask[row].bool()].tolist())


@pytest.mark.parametrize("make, parser, call, header, after_end", [
    (qwen25, "hermes", HERMES, QWEN_HEADER, "\n"),
    (llama31, "llama3_json", LLAMA, LLAMA_HEADER, ""),  # the content goes through tojson: 2 tokens a character
])
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_long_observation_loses_content_not_template_tokens(make, parser, call, header, after_end, side):
    tok = make()
    agent = shout_agent(parser)
    prompts = prompts_for(tok, agent)
    limits = TurnLimits(**{**LIMITS.__dict__, "max_observation_tokens": 60, "observation_truncation": side})
    gen = run_episodes(ScriptedEngine(tok, [call, "ok"], header=header), tok, prompts, 1, agent=agent, limits=limits)
    info = gen.episodes[0]
    assert info.truncation is None and info.turns == 2 and 0 < info.observation_tokens <= 60
    content = info.messages[1]["content"]
    assert 0 < len(content) < 60 and set(content) <= set('a"b\n')
    conversation = [*prompts[0].conversation, *info.messages]
    rendered = tok.apply_chat_template(conversation, tools=agent.tool_schemas, tokenize=False)
    assert tok.decode(sequence(gen, 0)) + after_end == rendered  # every template token where it belongs
    assert info.drift_tokens == 0


def test_messages_whose_template_alone_exceeds_the_limit_end_the_episode_truncated():
    tok = qwen25()
    agent = shout_agent("hermes")
    # one empty result takes 53 tokens of this template, two take 87: 60 fits one result, not two
    two_calls = HERMES + HERMES
    limits = TurnLimits(**{**LIMITS.__dict__, "max_observation_tokens": 60})
    gen = run_episodes(ScriptedEngine(tok, [two_calls, "ok"]), tok, prompts_for(tok, agent), 1, agent=agent,
                       limits=limits)
    info = gen.episodes[0]
    assert (info.truncation, info.turns, info.observation_tokens) == ("max_observation_tokens", 1, 0)
    assert info.messages == [{"role": "assistant", "content": two_calls}]  # the policy saw no result
    policy = gen.policy_mask[0][gen.response_mask[0].bool()].tolist()
    assert policy == [1] * len(policy)  # no observation token appended, cut or whole
    assert bool(gen.truncated[0])
    assert episode_metrics(gen.episodes, ["shout"])["rollout/truncated/max_observation_tokens"] == 1.0
