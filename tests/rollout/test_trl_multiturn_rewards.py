"""A TRL-style reward in a multi-turn tool run gets what TRL's tool loop gives it (issue 24): each
completion is the list of messages after the prompt - assistant turns with their parsed
``tool_calls``, the ``tool`` results, the final answer - not the transcript as one message with
the role words in its text. steadyrl-style rewards keep getting the transcript's text."""

from __future__ import annotations

import torch

from agents.templates import qwen25
from rollout.test_episodes import CALL, LIMITS, ScriptedEngine, tool_agent
from steadyrl.data.prompts import PromptFormat, prepare_prompts
from steadyrl.rewards import RewardSpec
from steadyrl.rewards.scorer import Scorer, score_episodes
from steadyrl.rollout.episodes import run_episodes

torch.set_num_threads(1)


def final_answer(completions, answer, **kwargs):
    """TRL's documented shape: the last message of the completion is the model's final answer."""
    return [1.0 if completion[-1]["content"].strip() == a else 0.0 for completion, a in zip(completions, answer)]


def called_a_tool(completions, **kwargs):
    return [float(any(m.get("tool_calls") for m in c if m["role"] == "assistant")) for c in completions]


def tool_results(completions, **kwargs):
    return [float(sum(m["role"] == "tool" for m in c)) for c in completions]


def text_style(prompts, completions, **kwargs):
    return [float(isinstance(c, str)) for c in completions]


def _episodes(script):
    tok = qwen25()
    agent = tool_agent()
    records = [{"prompt": [{"role": "user", "content": "What is 1+2?"}], "answer": "3"}]
    prompts, _ = prepare_prompts(records, tok, PromptFormat(5000, chat_template=True, tools=agent.tool_schemas),
                                 source="test")
    gen = run_episodes(ScriptedEngine(tok, script), tok, prompts, 2, agent=agent, limits=LIMITS)
    return [p for p in prompts for _ in range(2)], gen


def test_trl_style_rewards_get_the_messages_after_the_prompt_with_tool_calls_and_results():
    samples, gen = _episodes([CALL, "3"])
    scorer = Scorer([RewardSpec(f.__name__, f) for f in (final_answer, called_a_tool, tool_results, text_style)])
    try:
        result = score_episodes(scorer, samples, gen, environment=False)
    finally:
        scorer.close()
    assert all(result.failed(name) == 0 for name in result.names), result.errors
    assert result.raw["final_answer"] == [1.0, 1.0]  # the old call scored 0: one message holding every turn
    assert result.raw["called_a_tool"] == [1.0, 1.0]
    assert result.raw["tool_results"] == [1.0, 1.0]
    assert result.raw["text_style"] == [1.0, 1.0]


def test_the_episode_keeps_its_turns_as_the_conversation_does():
    _, gen = _episodes([CALL, "3"])
    chat = gen.episodes[0].chat
    assert [m["role"] for m in chat] == ["assistant", "tool", "assistant"]
    assert chat[0]["tool_calls"][0]["function"]["name"] == "add"
    assert chat[1]["content"] == "3" and chat[2]["content"] == "3"
    assert gen.episodes[0].messages[0]["content"] == CALL  # the transcript keeps the text sampled
