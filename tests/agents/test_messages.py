"""The conversation keeps a tool-calling turn as OpenAI-structured messages (agents/messages.py)."""

from steadyrl.agents.messages import assistant_message, call_id, id_style
from steadyrl.agents.parsers import TOOL_PARSERS, ParsedTurn, ToolCall
from steadyrl.agents.toolagent import ToolAgent
from steadyrl.agents.tools import Tool


def test_a_turn_without_calls_stays_its_text():
    text = "<think>\nr\n</think>\n\nThe answer is 9."
    assert assistant_message(text, ParsedTurn(content="The answer is 9."), first_index=0, style="alnum9") == {
        "role": "assistant", "content": text}


def test_calls_get_nine_character_ids_numbered_over_the_episode_unless_the_model_wrote_one():
    parsed = ParsedTurn(content="Let me add.", calls=[ToolCall("add", {"a": 1}), ToolCall("add", {"a": 2}, "abc123def")])
    message = assistant_message("...", parsed, first_index=3, style="alnum9")
    assert message["content"] == "Let me add."
    assert [c["id"] for c in message["tool_calls"]] == ["call00003", "abc123def"]
    assert message["tool_calls"][0] == {"id": "call00003", "type": "function",
                                        "function": {"name": "add", "arguments": {"a": 1}}}
    assert all(len(c["id"]) == 9 and c["id"].isalnum() for c in message["tool_calls"])  # Mistral's rule


def test_kimi_templates_get_their_own_id_style():
    assert id_style("{{ '## Return of ' + message.tool_call_id }}") == "kimi"
    assert call_id("kimi", "add", 2) == "functions.add:2" and id_style("{{ '<|im_start|>' }}") == "alnum9"


def test_harmony_reasoning_goes_to_thinking_and_the_answer_to_content():
    text = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>9"
    message = assistant_message(text, TOOL_PARSERS["harmony"](text), first_index=0, style="alnum9")
    assert message == {"role": "assistant", "content": "9", "thinking": "think"}


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


def test_the_tool_agent_answers_each_call_with_its_id_and_numbers_calls_per_episode():
    from transformers.utils import get_json_schema

    agent = ToolAgent([Tool(name="add", fn=add, schema=get_json_schema(add))], TOOL_PARSERS["hermes"], timeout_s=5.0,
                      isolation="inline")
    states = [s.state for s in agent.start([{}, {}], [0, 1])]
    call = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    first = agent.respond(states, [call + call, call])
    second = agent.respond(states[:1], [call])
    assert [c["id"] for c in first[0].assistant["tool_calls"]] == ["call00000", "call00001"]
    assert [m["tool_call_id"] for m in first[0].messages] == ["call00000", "call00001"]
    assert first[1].assistant["tool_calls"][0]["id"] == "call00000"  # another episode counts from 0
    assert second[0].messages[0] == {"role": "tool", "name": "add", "content": "3", "tool_call_id": "call00002"}


CONTENT_ONLY = ("{% if tools %}{{ 'Return each call within <tool_call> tags. Tools: ' }}"
                "{% for t in tools %}{{ t.function.name + ' ' }}{% endfor %}{{ '\\n' }}{% endif %}"
                "{% for m in messages %}{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}")
"""Falcon-H1's and LFM2's shape: the tools in the system text (whose instructions hold "hi", in
"within"), every message as its content only: a structured call renders as nothing."""


def test_a_template_that_shows_only_content_is_seen_as_one_whatever_its_tool_instructions_say(char_tokenizer):
    import copy

    from steadyrl.agents.messages import renders_tool_calls

    tok = copy.deepcopy(char_tokenizer)
    tok.chat_template = CONTENT_ONLY
    schema = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
    assert renders_tool_calls(tok, [schema]) is False  # it was True: "add" follows the "hi" of "within"
