"""Which built-in reward options make a foreign run directory's config run code or reach the
evaluator's secrets and servers (steadyrl.run.trust): every option of every built-in is
classified, so a new option cannot slip past ``steadyrl eval --output-dir`` unnoticed."""

from __future__ import annotations


import pytest

from steadyrl.config.reward_options import REWARD_OPTIONS
from steadyrl.rewards import BUILTIN_REWARDS
from steadyrl.run.trust import CODE_OPTIONS, ENDPOINT_OPTIONS, SANDBOX_OPTIONS, SECRET_OPTIONS, option_findings

HARMLESS = {
    # what to score and how: text, numbers, columns, choices among steadyrl's own code
    "answer_key", "marker", "last_line", "strip", "pattern", "flags", "mode", "target_length", "max_length",
    "unit", "gold_marker", "tests_key", "test_format", "extract", "score", "threshold", "tolerance",
    "on_timeout", "language", "backend", "template", "system_prompt", "min_score", "max_score", "scale",
    "normalize", "mean", "std", "label_index", "chat_template", "columns", "answer_tag", "column",
    "criteria", "criteria_key", "rubric_template",  # llm_judge's rubric: text and a column, as template
    # sizes, time limits and retries (bounded by the reward itself)
    "workers", "test_timeout_s", "sample_timeout_s", "max_tests", "memory_mb", "processes", "file_size_mb",
    "open_files", "max_output_kib", "batch_size", "concurrency", "retries", "backoff_s", "request_timeout_s",
    "max_new_tokens", "cache_size", "check_url",
    # models by hub name or directory, loaded without their own code (trust_remote_code is separate)
    "model", "revision", "tokenizer", "device", "dtype",
    # values only: a {env: NAME} or an http(s):// value among them is caught wherever it is
    "headers",
}


@pytest.mark.parametrize("name", sorted(BUILTIN_REWARDS))
def test_every_option_of_every_built_in_reward_is_classified(name):
    flagged = set(CODE_OPTIONS) | set(ENDPOINT_OPTIONS) | set(SECRET_OPTIONS) | set(SANDBOX_OPTIONS)
    options = set(REWARD_OPTIONS[name].model_fields)  # equal to the factory's (tests/rewards/test_reward_options.py)
    assert not options - flagged - HARMLESS, f"classify these options of {name!r} in steadyrl/run/trust.py"


def test_findings_reach_any_depth_and_leave_harmless_options_alone():
    found = option_findings({"model": "org/rm", "batch_size": 8, "extra": [{"deep": {"trust_remote_code": True}}],
                             "headers": {"X-Key": {"env": "HF_TOKEN"}, "X-Trace": "abc"},
                             "note": "see the docs", "scorer": ["https://example.org/score"]}, "rewards[0].options")
    assert found == ["rewards[0].options.extra[0].deep.trust_remote_code = True (imports the model's own Python files)",
                     "rewards[0].options.headers.X-Key = {env: HF_TOKEN} (reads the environment variable HF_TOKEN)",
                     "rewards[0].options.scorer[0] = 'https://example.org/score' (a server the samples are sent to)"]
    assert option_findings({"model": "org/rm", "trust_remote_code": False, "python": None, "no_network": True,
                            "url": None}, "o") == []


def test_a_foreign_config_that_gives_up_the_code_sandboxs_view_needs_the_flag():
    found = option_findings({"sandbox": "namespaces", "no_network": False, "readonly_fs": True}, "rewards[0].options")
    assert found == ["rewards[0].options.sandbox = 'namespaces' (loosens the sandbox of the programs it runs)",
                     "rewards[0].options.no_network = False (loosens the sandbox of the programs it runs)"]
    assert option_findings({"sandbox": "bwrap"}, "o") == option_findings({"sandbox": "auto"}, "o") == []


def _config_with_environment(spec: str):
    from types import SimpleNamespace

    return SimpleNamespace(rewards=[], model=SimpleNamespace(trust_remote_code=False),
                           teacher=SimpleNamespace(name_or_path=None, trust_remote_code=False),
                           rollout=SimpleNamespace(multi_turn=SimpleNamespace(tools=[], environment=spec, agent=None,
                                                                      tool_parser="hermes")))


def test_a_foreign_textarena_game_runs_no_new_code_but_an_openenv_server_or_a_user_class_needs_the_flag():
    from steadyrl.run.trust import run_code

    for spec, needs_flag in [("textarena:TicTacToe-v0", False), ("openenv:http://10.0.0.1:8000", True),
                             ("their_env.py:Env", True)]:
        for saved in ({"rollout": {"multi_turn": {"environment": spec}}},
                      {"rollout": {"environment": spec}}):  # a config.yaml saved before the keys moved
            found = run_code(_config_with_environment(spec), saved)
            assert bool(found) == needs_flag, (spec, saved, found)
        assert run_code(_config_with_environment(spec), {}) == []  # set on the command line: the user's own
