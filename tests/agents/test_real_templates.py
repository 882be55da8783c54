"""Conformance on the chat templates models publish (llama.cpp's copies, downloaded once and cached).

Every family of issue 21 the sdist has, with tools and with user-role observations, in every
``rollout.multi_turn.mode``: the start-up probe's verdict, a scripted episode through the real
rollout judged in the mode's own terms (single: against ``apply_chat_template`` of the whole
conversation; stepwise: each turn's sample against the rendering of its history; as_sampled: the
contexts and observations against the template), and the parser round trip
(tests/support_conformance.py). The promise: every case is exact or refused with a message naming
the behaviour; none is accepted silently.
"""

import pytest
from support_conformance import MODES, TURN_MODES, evaluate
from support_realtemplates import FAMILIES, TemplatesUnavailable, family_tokenizer, template_dir

pytestmark = [pytest.mark.realdata]

_CASES: dict = {}


@pytest.fixture(scope="module")
def templates():
    try:
        return template_dir()
    except TemplatesUnavailable as err:
        pytest.skip(f"the real chat templates cannot be fetched: {err}")


def case(templates, name: str, mode: str, turn_mode: str = "single"):
    if (name, mode, turn_mode) not in _CASES:
        family = next(f for f in FAMILIES if f.name == name)
        _CASES[name, mode, turn_mode] = evaluate(family, mode, templates, turn_mode=turn_mode)
    return _CASES[name, mode, turn_mode]


def test_the_sdist_has_every_family_the_suite_names(templates):
    missing = [f.template for f in FAMILIES if not (templates / f.template).exists()]
    assert not missing


@pytest.mark.parametrize("turn_mode", TURN_MODES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", [f.name for f in FAMILIES])
def test_no_template_is_accepted_unless_its_episode_is_exact(templates, name, mode, turn_mode):
    c = case(templates, name, mode, turn_mode)
    if c.verdict == "exact":
        assert c.episode == "exact", f"{name}/{mode}/{turn_mode}: the probe accepts an episode that {c.episode}"
        assert c.overhead > 0  # the start-up check of max_observation_tokens works with it too
    if c.episode != "exact":
        assert c.verdict != "exact"
    if c.verdict != "exact":  # a refusal says what the template does (and the mode key when it is not single)
        assert f"chat template of {name!r}" in c.verdict or "tool parser" in c.verdict
        assert turn_mode == "single" or c.verdict.startswith(f"rollout.multi_turn.mode = {turn_mode!r}")
    if c.round_trip is not None:
        assert c.round_trip, f"{name}: the {c.parser} parser does not read back the template's call"


@pytest.mark.parametrize("name", ["Hermes-3", "Hermes-2-Pro"])
def test_hermes_tool_use_templates_are_refused_for_re_rendering_tool_results(templates, name):
    # they write "</tool_response>\n<|im_end|>" once a turn follows, "</tool_response><|im_end|>" before
    verdict = case(templates, name, "tools").verdict
    assert "renders the conversation so far differently once an assistant turn follows it" in verdict
    assert "<|im_end|><|im_start|>assistant" in verdict and "per-turn samples" in verdict
    assert "rollout.multi_turn.mode: stepwise" in verdict and "rollout.multi_turn.mode: as_sampled" in verdict


THINKING = [("Qwen3", "user"), ("Qwen3 (no thinking)", "tools"), ("Qwen3 (no thinking)", "user"), ("QwQ", "tools"),
            ("QwQ", "user"), ("Qwen3.5", "user"), ("DeepSeek-R1-Distill-Qwen", "user"),
            ("DeepSeek-R1-Distill-Llama", "user"), ("GLM-4.6", "user"), ("gpt-oss", "tools"), ("gpt-oss", "user")]


@pytest.mark.parametrize("turn_mode", ["stepwise", "as_sampled"])
@pytest.mark.parametrize("name, mode", THINKING)
def test_thinking_templates_train_exactly_in_the_stepwise_and_as_sampled_modes(templates, name, mode, turn_mode):
    c = case(templates, name, mode, turn_mode)
    assert (c.verdict, c.episode) == ("exact", "exact"), (c.verdict, c.episode)


@pytest.mark.parametrize("name, mode", THINKING + [("Hermes-3", "tools"), ("Command-R7B", "user")])
def test_single_mode_refuses_them_naming_the_modes_that_work_and_auto_picks_stepwise(templates, name, mode):
    from steadyrl.agents.parsers import TOOL_PARSERS
    from steadyrl.agents.modes import check_mode
    from support_conformance import add_tool
    from support_realtemplates import family_tokenizer

    verdict = case(templates, name, mode).verdict
    assert verdict != "exact" and "rollout.multi_turn.mode: stepwise" in verdict
    family = next(f for f in FAMILIES if f.name == name)
    tok = family_tokenizer(family, templates)
    picked = check_mode(tok, "auto", tools=[add_tool().schema] if mode == "tools" else None,
                        observation_role="tool" if mode == "tools" else "user", end_texts=list(family.stops),
                        template_kwargs=family.kwargs or None, parser=TOOL_PARSERS[case(templates, name, mode).parser])
    assert picked == "stepwise"


@pytest.mark.parametrize("name", ["Qwen2.5", "Llama-3.1", "Mistral-Nemo", "Kimi-K2", "GLM-4.6"])
def test_auto_keeps_one_sequence_for_append_only_templates(templates, name):
    from steadyrl.agents.parsers import TOOL_PARSERS
    from steadyrl.agents.modes import check_mode
    from support_conformance import add_tool
    from support_realtemplates import family_tokenizer

    family = next(f for f in FAMILIES if f.name == name)
    tok = family_tokenizer(family, templates)
    assert check_mode(tok, "auto", tools=[add_tool().schema], observation_role="tool", end_texts=list(family.stops),
                      template_kwargs=family.kwargs or None,
                      parser=TOOL_PARSERS[case(templates, name, "tools").parser]) == "single"


def test_thinking_templates_with_user_observations_are_refused_naming_the_dropped_reasoning(templates):
    for name in ("Qwen3", "Qwen3.5", "GLM-4.6"):
        verdict = case(templates, name, "user").verdict
        assert "drops their <think> blocks" in verdict and "rollout.multi_turn.observation_role: tool" in verdict, name
    assert "drops the reasoning the model writes" in case(templates, "DeepSeek-R1-Distill-Llama", "user").verdict
    assert "drops the reasoning the model writes" in case(templates, "gpt-oss", "tools").verdict


@pytest.mark.parametrize("name, mode", [
    ("GLM-4.6", "tools"),  # no closer: the next role token (<|observation|>) ends a turn and stops generation
    ("Gemma-2", "user"),  # <end_of_turn>, not eos_token, closes a turn
    ("Phi-3.5", "user"),  # eos_token appended only when no generation prompt follows
    ("Mistral-Nemo", "tools"), ("Mistral-Small-3.2", "tools"), ("Devstral", "tools"),  # need tool_calls + ids
    ("Kimi-K2", "tools"), ("Llama-3.1", "tools"), ("Qwen3-Coder", "tools"),
])
def test_templates_the_old_probe_refused_or_broke_are_exact(templates, name, mode):
    c = case(templates, name, mode)
    assert (c.verdict, c.episode) == ("exact", "exact")


def test_kimi_k2_shows_the_model_the_id_of_the_call_a_result_answers(templates):
    from steadyrl.agents.chat import observation_ids
    from steadyrl.agents.messages import assistant_message, tool_message
    from steadyrl.agents.parsers import TOOL_PARSERS

    family = next(f for f in FAMILIES if f.name == "Kimi-K2")
    tok = family_tokenizer(family, templates)
    text = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>"
            '{"a": 1, "b": 2}<|tool_call_end|><|tool_calls_section_end|>')
    assistant = assistant_message(text, TOOL_PARSERS["kimi_k2"](text), first_index=0, style="kimi")
    result = tool_message("add", "3", assistant["tool_calls"][0]["id"])
    obs = tok.decode(observation_ids(tok, [{"role": "user", "content": "1+2?"}], assistant, [result], tools=None,
                                     end_texts=list(family.stops), end="<|im_end|>"))
    assert "## Return of functions.add:0" in obs  # (the template writes a literal backslash-n after it)


def test_glm_refuses_an_observation_after_the_wrong_role_token(templates):
    # the policy stopped with <|user|> but a tool result follows: the template writes <|observation|> there
    from steadyrl.agents.chat import TemplateError, observation_ids
    from steadyrl.agents.messages import tool_message

    family = next(f for f in FAMILIES if f.name == "GLM-4.6")
    tok = family_tokenizer(family, templates)
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call00000", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]}
    with pytest.raises(TemplateError, match=r"ended its turn with '<\|user\|>' where .* writes '<\|observation\|>'"):
        observation_ids(tok, [{"role": "user", "content": "1+2?"}], call, [tool_message("add", "3", "call00000")],
                        tools=None, end_texts=list(family.stops), end="<|user|>")


REAL_VOCABS = [("Qwen2.5", "qwen2"), ("Qwen3", "qwen2"), ("Qwen3-Coder", "qwen2"), ("Llama-3.1", "llama-bpe"),
               ("Llama-3.3", "llama-bpe")]


@pytest.mark.slow
@pytest.mark.parametrize("name, vocab", REAL_VOCABS)
def test_with_the_real_vocabulary_exact_cases_are_exact_token_for_token(templates, name, vocab):
    # the byte-level tokenizer above cannot see BPE merges across the places steadyrl splices;
    # the real Qwen2 / Llama-3 vocabularies (GGUF, converted once) can
    from support_realtemplates import real_tokenizer

    try:
        tok = real_tokenizer(vocab, templates)
    except TemplatesUnavailable as err:
        pytest.skip(str(err))
    family = next(f for f in FAMILIES if f.name == name)
    for mode in MODES:
        for turn_mode in TURN_MODES:
            real = evaluate(family, mode, templates, tok=tok, turn_mode=turn_mode)
            assert (real.verdict == "exact") == (case(templates, name, mode, turn_mode).verdict == "exact"), (
                name, mode, turn_mode)
            if real.verdict == "exact":
                assert real.episode == "exact", (name, mode, turn_mode, real.episode)
