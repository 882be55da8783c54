"""Observation tokens after a sampled turn, and the start-up probe of a chat template.

Each episode test plays the rollout's part: the prompt's tokens, then per turn the *sampled*
tokens (assistant text + end token, tokenised on their own as the policy would emit them) and the
observation tokens; the whole sequence must decode to the template's own rendering of the
conversation at every turn.
"""

import datetime

import pytest
from agents.templates import (
    CHATML_NO_TOOLS, LLAMA_ENDS, QWEN_END, USER_ASSISTANT_ONLY, chat_tokenizer, llama31, llama32_dated, qwen3,
    qwen25,
)

from steadyrl.agents.chat import TemplateDriftError, TemplateError, check_template, observation_ids, render
from steadyrl.errors import ConfigError

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}]
PROMPT = [{"role": "user", "content": "What is 2 + 3 + 4?"}]
HERMES_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
LLAMA_CALL = '{"name": "add", "parameters": {"a": 2, "b": 3}}'


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def play(tokenizer, turns, *, end, end_texts, tools=TOOLS, prompt=PROMPT):
    """Run an episode of ``turns`` = [(assistant_text, new_messages)]; check the token sequence
    against the template's rendering after every turn; return the per-turn observation ids."""
    history = list(prompt)
    ids = encode(tokenizer, render(tokenizer, history, tools=tools, add_generation_prompt=True))
    observations = []
    for assistant_text, new_messages in turns:
        ids += encode(tokenizer, assistant_text + end)
        obs = observation_ids(tokenizer, history, assistant_text, new_messages, tools=tools, end_texts=end_texts)
        ids += obs
        observations.append(obs)
        history += [{"role": "assistant", "content": assistant_text}] + new_messages
        expected = render(tokenizer, history, tools=tools, add_generation_prompt=True)
        assert tokenizer.decode(ids, skip_special_tokens=False) == expected
    return observations


def tool(content):
    return {"role": "tool", "content": content}


def test_qwen25_tool_results_continue_the_conversation_exactly():
    tok = qwen25()
    obs = play(tok, [
        ("I will add.\n" + HERMES_CALL + "\n" + HERMES_CALL.replace("3", "4"), [tool("5"), tool("6")]),
        (HERMES_CALL.replace('"a": 2, "b": 3', '"a": 5, "b": 4'), [tool("9")]),
        ("The answer is 9.", [{"role": "user", "content": "Thanks. Now 1 + 1?"}]),
    ], end=QWEN_END, end_texts=[QWEN_END])
    first = tok.decode(obs[0], skip_special_tokens=False)
    # the "\n" Qwen writes after <|im_end|>, both results merged in one user turn, a new prompt
    assert first == ("\n<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n6\n"
                     "</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_qwen25_user_observations_continue_the_conversation_exactly():
    play(qwen25(), [
        ("<think>\nguess\n</think>\n\n8", [{"role": "user", "content": "Wrong, try again."}]),
        ("<think>\nadd again\n</think>\n\n9", [{"role": "user", "content": "Correct."}]),
    ], end=QWEN_END, end_texts=[QWEN_END], tools=None)


def test_qwen3_keeps_reasoning_of_earlier_turns_with_tool_observations():
    play(qwen3(), [
        ("<think>\nadd 2 and 3 first\n</think>\n\n" + HERMES_CALL, [tool("5")]),
        ("<think>\nnow add 4\n</think>\n\n" + HERMES_CALL.replace('"a": 2, "b": 3', '"a": 5, "b": 4'),
         [tool("9")]),
        ("<think>\ndone\n</think>\n\nThe answer is 9.", [tool("ok")]),
    ], end=QWEN_END, end_texts=[QWEN_END])


def test_qwen3_with_user_observations_drifts_and_says_where():
    tok = qwen3()
    with pytest.raises(TemplateDriftError) as err:
        observation_ids(tok, PROMPT, "<think>\nguess\n</think>\n\n8", [{"role": "user", "content": "Wrong."}],
                        tools=None, end_texts=[QWEN_END])
    message = str(err.value)
    assert "first difference at character" in message
    assert "<think>" in message  # the context shows the block that disappeared
    assert isinstance(err.value, ConfigError)


@pytest.mark.parametrize("role", ["tool", "ipython"])
def test_llama31_tool_results_render_as_ipython_turns_exactly(role):
    tok = llama31()
    obs = play(tok, [
        ("<|python_tag|>" + LLAMA_CALL, [{"role": role, "content": "5"}]),
        (LLAMA_CALL.replace('"a": 2, "b": 3', '"a": 5, "b": 4'), [{"role": role, "content": "9"}]),
        ("The answer is 9.", [{"role": "user", "content": "Thanks."}]),
    ], end="<|eot_id|>", end_texts=LLAMA_ENDS)
    # nothing follows <|eot_id|>; the content goes through tojson, as in the real template
    assert tok.decode(obs[0], skip_special_tokens=False) == (
        '<|start_header_id|>ipython<|end_header_id|>\n\n"5"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_a_template_with_todays_date_in_its_header_continues_exactly():
    tok = llama32_dated()
    today = datetime.datetime.now().strftime("%d %b %Y")
    assert f"Today Date: {today}" in render(tok, PROMPT, tools=TOOLS, add_generation_prompt=True)
    play(tok, [(LLAMA_CALL, [tool("5")]), ("9", [{"role": "user", "content": "ok"}])],
         end="<|eot_id|>", end_texts=LLAMA_ENDS)


def test_end_texts_the_template_never_writes_are_an_error():
    with pytest.raises(TemplateError, match=r"does not close an assistant turn with any of .*<\|eot_id\|>"):
        observation_ids(qwen25(), PROMPT, "8", [tool("x")], tools=None, end_texts=["<|eot_id|>"])


def test_a_failing_template_is_a_template_error_naming_what_was_rendered():
    with pytest.raises(TemplateError, match="failed to render a prompt with tools: .*no first user message"):
        render(llama31(), [{"role": "system", "content": "Be brief."}], tools=TOOLS,
               add_generation_prompt=True, purpose="a prompt with tools")


# --- check_template --------------------------------------------------------------------------


@pytest.mark.parametrize("make, role, ends", [
    (qwen25, "tool", [QWEN_END]),
    (qwen25, "user", [QWEN_END]),
    (qwen3, "tool", [QWEN_END]),
    (llama31, "tool", LLAMA_ENDS),
    (llama31, "ipython", LLAMA_ENDS),
    (llama31, "user", LLAMA_ENDS),
    (llama32_dated, "tool", LLAMA_ENDS),
])
@pytest.mark.parametrize("tools", [TOOLS, None])
def test_templates_that_support_multi_turn_pass_the_probe(make, role, ends, tools):
    check_template(make(), tools=tools, observation_role=role, end_texts=ends)


def test_qwen3_with_user_observations_fails_the_probe_naming_the_behaviour_and_the_fix():
    with pytest.raises(TemplateDriftError) as err:
        check_template(qwen3(), tools=None, observation_role="user", end_texts=[QWEN_END])
    message = str(err.value)
    assert "(it re-renders earlier assistant turns: it drops their <think> blocks)" in message
    assert "'tool' role" in message


def test_a_template_that_ignores_tools_fails_the_probe():
    tok = chat_tokenizer(CHATML_NO_TOOLS)
    with pytest.raises(TemplateError, match=r"ignores tools=.*\['add'\]"):
        check_template(tok, tools=TOOLS, observation_role="tool", end_texts=[QWEN_END])
    check_template(tok, tools=None, observation_role="user", end_texts=[QWEN_END])  # fine without tools


def test_a_template_that_drops_tool_messages_fails_the_probe():
    with pytest.raises(TemplateError, match="cannot render tool messages"):
        check_template(chat_tokenizer(USER_ASSISTANT_ONLY), tools=None, observation_role="tool",
                       end_texts=[QWEN_END])


def test_a_tokenizer_without_a_template_fails_the_probe_and_render():
    tok = chat_tokenizer(None)
    with pytest.raises(TemplateError, match="multi-turn rollouts need a chat template.*'test-chat-tokenizer'"):
        check_template(tok, tools=None, observation_role="user", end_texts=[QWEN_END])
    with pytest.raises(TemplateError, match="need a chat template"):
        render(tok, PROMPT, tools=None, add_generation_prompt=True)


def test_wrong_end_texts_fail_the_probe():
    with pytest.raises(TemplateError, match="does not close an assistant turn"):
        check_template(llama31(), tools=None, observation_role="tool", end_texts=[QWEN_END])


def test_template_kwargs_reach_the_template():
    tok = llama31()
    kwargs = {"date_string": "01 Jan 2030"}
    assert "Today Date: 01 Jan 2030" in render(tok, PROMPT, tools=None, add_generation_prompt=True,
                                               template_kwargs=kwargs)
    obs = observation_ids(tok, PROMPT, LLAMA_CALL, [tool("5")], tools=TOOLS, end_texts=LLAMA_ENDS,
                          template_kwargs=kwargs)
    assert tok.decode(obs, skip_special_tokens=False).startswith("<|start_header_id|>ipython")
    check_template(tok, tools=TOOLS, observation_role="tool", end_texts=LLAMA_ENDS, template_kwargs=kwargs)


def test_qwen3_without_thinking_fails_the_probe_even_with_tool_observations():
    # enable_thinking=False puts an empty <think> block in the generation prompt, so the model writes
    # none; the template shows that block on the last assistant turn only, and drops it once a
    # tool result follows: the turn is re-rendered, which the probe must catch before training.
    kwargs = {"enable_thinking": False}
    tok = qwen3()
    with pytest.raises(TemplateDriftError, match="drops their <think> blocks"):
        check_template(tok, tools=TOOLS, observation_role="tool", end_texts=[QWEN_END], template_kwargs=kwargs)
    with pytest.raises(TemplateDriftError):
        observation_ids(tok, PROMPT, HERMES_CALL, [tool("5")], tools=TOOLS, end_texts=[QWEN_END],
                        template_kwargs=kwargs)
    check_template(tok, tools=TOOLS, observation_role="tool", end_texts=[QWEN_END])  # thinking on: fine


@pytest.mark.parametrize("make, role, ends", [
    (qwen25, "tool", [QWEN_END]), (qwen25, "user", [QWEN_END]), (llama31, "tool", LLAMA_ENDS),
    (llama31, "user", LLAMA_ENDS),
])
def test_the_observation_overhead_is_what_an_empty_message_takes(make, role, ends):
    from steadyrl.agents.chat import observation_overhead

    tok = make()
    overhead = observation_overhead(tok, tools=TOOLS, observation_role=role, end_texts=ends)
    empty = observation_ids(tok, PROMPT, "ok", [{"role": role, "name": "add", "content": ""}], tools=TOOLS,
                            end_texts=ends)
    five = observation_ids(tok, PROMPT, "ok", [{"role": role, "name": "add", "content": "12345"}], tools=TOOLS,
                           end_texts=ends)
    assert overhead == len(empty) > 0 and len(five) == overhead + len(encode(tok, "12345"))


def test_a_template_that_re_renders_tool_results_once_a_turn_follows_is_refused():
    from agents.templates import HERMES_TOOL_USE

    tok = chat_tokenizer(HERMES_TOOL_USE)
    with pytest.raises(TemplateDriftError, match="renders the conversation so far differently once an assistant "
                                                 "turn follows it.*per-turn samples") as err:
        check_template(tok, tools=None, observation_role="tool", end_texts=[QWEN_END])
    assert "the conversation with the turn '\\n<|im_end|>" in str(err.value)  # the "\n" it adds


def test_a_parser_that_cannot_read_the_templates_calls_fails_the_probe():
    from steadyrl.agents.parsers import TOOL_PARSERS

    with pytest.raises(TemplateError, match="tool parser does not read back the call the chat template teaches"):
        check_template(qwen25(), tools=TOOLS, observation_role="tool", end_texts=[QWEN_END],
                       parser=TOOL_PARSERS["mistral"])
    check_template(qwen25(), tools=TOOLS, observation_role="tool", end_texts=[QWEN_END], parser=TOOL_PARSERS["hermes"])


def test_a_turn_ended_by_another_stop_token_than_the_templates_closer_still_continues():
    # Llama-3.1 may end a call with <|eom_id|> where the template writes <|eot_id|>: the sampled token
    # stays as sampled and the observation follows it
    obs = observation_ids(llama31(), PROMPT, LLAMA_CALL, [tool("5")], tools=TOOLS, end_texts=LLAMA_ENDS,
                          end="<|eom_id|>")
    assert llama31().decode(obs, skip_special_tokens=False).startswith("<|start_header_id|>ipython")
