"""The multi-turn start-up checks of :func:`steadyrl.assembly.agent.build_agent` that depend on the
chat template: ``rollout.multi_turn.max_observation_tokens`` must leave room for content after the tokens the
template needs to wrap one observation (below that, every long observation would lose its template
tokens or its episode)."""

from types import SimpleNamespace

import pytest
from agents.templates import llama31, qwen25
from support import ADD_TOOL_SOURCE

from steadyrl.config.schema import RolloutConfig
from steadyrl.errors import ConfigError
from steadyrl.assembly.agent import build_agent



class Guess:
    def reset(self, **row):
        return None

    def step(self, text):
        return "higher", 0.0, False


def config(tmp_path, **multi_turn):
    (tmp_path / "tools.py").write_text(ADD_TOOL_SOURCE)
    base = {"tools": [f"{tmp_path / 'tools.py'}:add"]} if "environment" not in multi_turn else {}
    ro = RolloutConfig(multi_turn={**base, "tool_isolation": "inline", **multi_turn})
    return SimpleNamespace(rollout=ro, data=SimpleNamespace(chat_template_kwargs={}))


@pytest.mark.parametrize("make, needed, parser", [(qwen25, 53, "hermes"), (llama31, 27, "llama3_json")])
def test_max_observation_tokens_below_the_templates_own_tokens_is_refused(tmp_path, make, needed, parser):
    tok = make()  # needed: what one empty tool result takes; parser: the one the template teaches
    for limit in (1, needed):
        with pytest.raises(ConfigError) as err:
            build_agent(config(tmp_path, max_observation_tokens=limit, tool_parser=parser), tok)
        message = str(err.value)
        assert message.startswith(f"rollout.multi_turn.max_observation_tokens = {limit}:")
        assert f"needs {needed} tokens" in message and f"at least {needed + 1}" in message
        assert "\n" not in message
    agent = build_agent(config(tmp_path, max_observation_tokens=needed + 1, tool_parser=parser), tok)
    agent.shutdown()


def test_environment_observations_are_checked_in_their_own_role(tmp_path, monkeypatch):
    import sys

    module = SimpleNamespace(Guess=Guess)
    monkeypatch.setitem(sys.modules, "steadyrl_test_guess", module)
    tok = qwen25()  # a user turn takes 20 tokens of this template, a tool result 53
    agent = build_agent(config(tmp_path, environment="steadyrl_test_guess:Guess", observation_role="user",
                               max_observation_tokens=21), tok)
    agent.shutdown()
    with pytest.raises(ConfigError, match="needs 20 tokens to wrap one empty 'user' message"):
        build_agent(config(tmp_path, environment="steadyrl_test_guess:Guess", observation_role="user",
                           max_observation_tokens=20), tok)


def test_a_tool_parser_that_cannot_read_the_templates_calls_is_refused_at_start_up(tmp_path):
    with pytest.raises(ConfigError) as err:  # Llama-3.1 teaches JSON calls; hermes reads <tool_call> tags
        build_agent(config(tmp_path, tool_parser="hermes"), llama31())
    assert "set rollout.multi_turn.tool_parser to the template's format" in str(err.value)


def test_a_template_that_shows_no_tool_calls_keeps_calling_turns_as_plain_content(tmp_path):
    """The tool demo's ChatML template renders only ``content``: a turn kept as ``tool_calls`` would
    render without the call the policy wrote, and the conversation would not be what it sampled."""
    from steadyrl.demo.chat_tokenizer import build_chat_tokenizer

    plain = build_chat_tokenizer(["What is 2*3? 6"], vocab_size=300)
    for tok, structured in [(plain, False), (qwen25(), True)]:
        agent = build_agent(config(tmp_path), tok)
        try:
            assert agent.structured_calls is structured
            text = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
            reply = agent.respond([{"calls": 0}], [text])[0]
            assert ("tool_calls" in reply.assistant) is structured
            assert structured or reply.assistant == {"role": "assistant", "content": text}
        finally:
            agent.shutdown()
