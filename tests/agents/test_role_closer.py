"""GLM-5.1 writes no closer after an assistant turn (the next role token, which stops generation,
ends it, as in every GLM) and renders the last turn otherwise than the same turn with a message
after it: an empty ``<think></think>`` in the last turn, ``</think>`` alone in earlier ones. The
probe looked for the role token only where the last turn's rendering ends, so it refused GLM-5.1
"for lacking an end-of-turn stop token" while GLM-5.2 / 5.3, with the same stop tokens and
``</think>`` alone when there is no reasoning, passed (issue 41, item 5). The templates below keep
just the part of GLM's templates that differs."""

import pytest
from support_conformance import evaluate
from support_realtemplates import Family

GLM_51 = """[gMASK]<sop>
{%- if tools -%}<|system|># Tools
<tools>{% for tool in tools %}{{ tool | tojson }}{% endfor %}</tools>
Call as <tool_call>{function-name}<arg_key>{arg-key}</arg_key><arg_value>{arg-value}</arg_value></tool_call>{%- endif -%}
{%- set ns = namespace(last_user_index=-1) %}
{%- for m in messages %}{%- if m.role == 'user' %}{% set ns.last_user_index = loop.index0 %}{%- endif %}{%- endfor %}
{%- for m in messages -%}
{%- if m.role == 'user' -%}<|user|>{{ m.content }}
{%- elif m.role == 'assistant' -%}<|assistant|>
{%- set reasoning = m.reasoning_content if m.reasoning_content is string else '' -%}
{%- if loop.index0 > ns.last_user_index -%}<think>{{ reasoning.strip() }}</think>{%- else -%}</think>{%- endif -%}
{{ (m.content or '').strip() }}
{%- for tc in m.tool_calls or [] -%}<tool_call>{{ tc.function.name }}
{%- for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v | tojson }}</arg_value>{% endfor -%}
</tool_call>{%- endfor -%}
{%- elif m.role == 'tool' -%}<|observation|><tool_response>{{ m.content }}</tool_response>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|assistant|><think>{%- endif -%}"""
GLM_52 = GLM_51.replace("loop.index0 > ns.last_user_index -%}", "loop.index0 > ns.last_user_index and reasoning -%}")
SPECIALS = ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|endoftext|>", "<think>",
            "</think>", "<tool_response>", "</tool_response>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
            "<arg_value>", "</arg_value>")
STOPS = ("<|endoftext|>", "<|user|>", "<|observation|>")


def cases(tmp_path, name, source, mode):
    (tmp_path / f"{name}.jinja").write_text(source)
    family = Family(name, f"{name}.jinja", "<|endoftext|>", STOPS, specials=SPECIALS)
    return {tm: evaluate(family, mode, tmp_path, turn_mode=tm) for tm in ("single", "stepwise", "as_sampled")}


@pytest.mark.parametrize("mode", ["user", "tools"])
@pytest.mark.parametrize("name, source", [("GLM-5.1", GLM_51), ("GLM-5.2", GLM_52)])
def test_glm_templates_with_the_same_stop_tokens_are_judged_alike(tmp_path, name, source, mode):
    found = cases(tmp_path, name, source, mode)
    assert all("does not close an assistant turn" not in c.verdict for c in found.values()), found
    # both re-render earlier turns (their reasoning is dropped): step-wise and as-sampled train them exactly
    assert {tm: (c.verdict, c.episode) for tm, c in found.items() if tm != "single"} == {
        "stepwise": ("exact", "exact"), "as_sampled": ("exact", "exact")}
    if mode == "user":  # a user message after an answer re-renders it: one sequence cannot hold both
        assert "renders the conversation differently" in found["single"].verdict
    else:  # tool results follow calls, which render alike
        assert (found["single"].verdict, found["single"].episode) == ("exact", "exact")
