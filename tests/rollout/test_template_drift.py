"""``rollout/retokenize_drift`` compares an episode with the chat template's rendering of its whole
conversation, not only with itself: a template that strips the reasoning of every assistant turn
(DeepSeek-R1 distills do) renders consistently turn after turn, so only that comparison sees that
the trained tokens are not the template's."""

from types import SimpleNamespace

from agents.templates import QWEN_END, chat_tokenizer
from support_conformance import LIMITS, TurnEngine, UserAgent

from steadyrl.agents.chat import render
from steadyrl.rollout.episodes import episode_metrics, run_episodes

# ChatML whose assistant turns always drop a <think> block (written here, after R1's shape)
STRIPS_THINKING = (
    "{%- for m in messages %}{%- set c = m.content.split('</think>')[-1] if m.role == 'assistant' else m.content %}"
    "{{- '<|im_start|>' + m.role + '\\n' + c + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# the same ChatML keeping every turn's reasoning, from the field a reasoning parser fills (issue 32: a
# <think> block is kept as reasoning_content, as an OpenAI-style server with a reasoning parser holds it)
KEEPS_THINKING = STRIPS_THINKING.replace(
    "m.content.split('</think>')[-1]",
    "('<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' if m.reasoning_content else '') + m.content")


def run(template: str):
    tok = chat_tokenizer(template)
    prompt = [{"role": "user", "content": "What is 1 + 2 + 4?"}]
    text = render(tok, prompt, tools=None, add_generation_prompt=True)
    item = SimpleNamespace(ids=tok(text, add_special_tokens=False)["input_ids"], columns={}, text=text,
                           messages=prompt, conversation=prompt)
    turns = [("<think>\nguess\n</think>\n\n8", QWEN_END), ("<think>\nadd\n</think>\n\n7", QWEN_END),
             ("Done.", QWEN_END)]
    return run_episodes(TurnEngine(tok, turns), tok, [item], 1, agent=UserAgent(None), limits=LIMITS)


def test_drift_counts_the_tokens_a_template_that_strips_reasoning_does_not_render():
    gen = run(STRIPS_THINKING)
    assert gen.episodes[0].turns == 3 and not gen.episodes[0].failed
    assert episode_metrics(gen.episodes)["rollout/retokenize_drift"] > 0


def test_drift_is_zero_when_the_episode_is_the_templates_rendering():
    gen = run(KEEPS_THINKING)
    assert gen.episodes[0].turns == 3
    assert episode_metrics(gen.episodes)["rollout/retokenize_drift"] == 0.0


def test_the_probe_refuses_a_template_that_strips_reasoning_from_every_turn():
    import pytest

    from steadyrl.agents.chat import TemplateDriftError, check_template

    with pytest.raises(TemplateDriftError, match="drops the reasoning"):
        check_template(chat_tokenizer(STRIPS_THINKING + "{# </think> #}"), tools=None, observation_role="user",
                       end_texts=[QWEN_END])
    check_template(chat_tokenizer(KEEPS_THINKING + "{# </think> #}"), tools=None, observation_role="user",
                   end_texts=[QWEN_END])
