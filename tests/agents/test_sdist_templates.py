"""Every chat template of the llama-cpp-python sdist, with tools and with user observations, in every
``rollout.multi_turn.mode`` (tests/support_sdist.py makes a family of each; tests/support_conformance.py
judges a case against the ground truth: ``apply_chat_template`` of the conversation as an
OpenAI-style server with a reasoning parser holds it). The promise: each case is exact or refused
with a message; none is accepted silently. docs/agents.md's table is generated from these cases.
"""

import importlib.util
from pathlib import Path

import pytest
from support_conformance import MODES, TURN_MODES, evaluate
from support_realtemplates import TemplatesUnavailable, template_dir
from support_sdist import sdist_families

pytestmark = [pytest.mark.realdata, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sdist():
    try:
        templates = template_dir()
    except TemplatesUnavailable as err:
        pytest.skip(f"the real chat templates cannot be fetched: {err}")
    families, skipped = sdist_families(templates)
    return templates, families, skipped


@pytest.fixture(scope="module")
def cases(sdist):
    templates, families, _ = sdist
    return [(f, evaluate(f, mode, templates, turn_mode=tm)) for f in families for mode in MODES for tm in TURN_MODES]


def test_every_template_of_the_sdist_is_a_case_or_left_out_with_the_reason(sdist):
    templates, families, skipped = sdist
    assert {f.template for f in families} | set(skipped) == {p.name for p in templates.glob("*.jinja")}
    assert all(reason.strip() for reason in skipped.values())
    assert len({f.template for f in families}) >= 60  # the sdist holds 71 templates


def test_no_case_is_accepted_unless_its_episode_is_the_ground_truth(cases):
    wrong = [(c.family, c.mode, c.turn_mode, c.episode) for _, c in cases if c.verdict == "exact" and c.episode != "exact"]
    assert not wrong


def test_every_refusal_says_what_the_template_does(cases):
    for _, c in cases:
        if c.verdict != "exact":
            assert f"chat template of {c.family!r}" in c.verdict or "tool parser" in c.verdict, c.verdict
            assert c.turn_mode == "single" or c.verdict.startswith(f"rollout.multi_turn.mode = {c.turn_mode!r}")


@pytest.mark.parametrize("name", ["poolside-Laguna-XS-2.1", "poolside-Laguna-XS.2"])
def test_laguna_xs_with_thinking_off_is_trained_as_one_sequence(cases, name):
    # the observation-room check wrote a <think> turn because the template names <think> (issue 32)
    verdicts = {(c.mode, c.turn_mode): c.verdict for _, c in cases if c.family == name}
    assert verdicts[("tools", "single")] == verdicts[("user", "single")] == "exact"


def test_the_table_in_docs_is_current(sdist, cases):
    spec = importlib.util.spec_from_file_location("template_table", REPO / "tools" / "template_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (REPO / "docs" / "agents.md").read_text()
    assert module.page(cases, text, sdist[2]) == text, "docs/agents.md's template table is stale: run python tools/template_table.py"
