"""The ``code`` built-in through the real scorer: program extraction, the three test formats
(stdin/stdout, function calls, asserts), output comparison, scoring options, the worker pool,
metrics, the start-up checks, and the SandboxFusion backend against a server on 127.0.0.1."""

import json
import math

import pytest
from support_http import ScriptedServer, free_port

from steadyrl.errors import ConfigError
from steadyrl.rewards import RewardScorer, RewardSpec, load_reward
from steadyrl.rewards.code_tests import TestsError, extract_program, parse_tests, stdout_matches, value_matches

FAST = {"test_timeout_s": 1.0, "sample_timeout_s": 3.0, "workers": 2}
ADD = {"inputs": ["1 2\n", "3 4\n", ["5", "6"]], "outputs": ["3\n", "7", "11\n\n"]}
ADD_PROGRAM = "a, b = map(int, open(0).read().split())\nprint(a + b)"


def block(source: str, tag: str = "python") -> str:
    return f"Here is my solution.\n```{tag}\n{source}\n```\nDone."


def score(completions, tests, **options):
    fn = load_reward("code", **{**FAST, **options})
    with RewardScorer([RewardSpec("code", fn, timeout_s=30, chunk_size=None)]) as scorer:
        return scorer.score(["p"] * len(completions), completions, {"tests": [tests] * len(completions)})


# --- the pieces without a sandbox ----------------------------------------------------------------
def test_the_last_python_block_is_the_program_by_default_and_other_languages_are_skipped():
    text = "```python\nfirst\n```\n```\nsecond\n```\n```cpp\nint main\n```"
    assert extract_program(text) == "second\n"
    assert extract_program(text, "first_block") == "first\n"
    assert extract_program("no fence at all") is None
    import re
    assert extract_program("<code>x = 1</code>", "regex", re.compile("<code>(.*)</code>", re.S)) == "x = 1"


def test_outputs_compare_up_to_trailing_whitespace_and_numbers_within_the_tolerance():
    assert stdout_matches("1 2  \n3\n\n", "1 2\n3")
    assert not stdout_matches("1 2\n", "1 3\n")
    assert stdout_matches("0.3333333", "0.33333333333", tolerance=1e-6)
    assert not stdout_matches("0.3333333", "0.33333333333", tolerance=0.0)
    assert not stdout_matches("0.4", "0.3333", tolerance=1e-6)
    assert value_matches([1, 2], [[1, 2]]) and value_matches(0.1 + 0.2, 0.3, 1e-9)
    assert not value_matches(True, 1) and not value_matches([1, 2], [2, 1])


def test_test_formats_are_told_apart_by_shape_and_asserts_keep_their_setup():
    assert parse_tests(json.dumps(ADD)).mode == "stdio"
    call = parse_tests({"fn_name": "f", "inputs": [[1, 2]], "outputs": [3]})
    assert (call.mode, call.cases, call.fn_name) == ("call", [[1, 2]], "f")
    asserts = parse_tests("import math\nassert f(1) == 1\nassert f(2) == 2\n")
    assert asserts.mode == "assert" and asserts.setup == "import math" and len(asserts.cases) == 2
    assert parse_tests(["assert f(1) == 1", "assert f(2) == 2"], max_tests=1).cases == ["assert f(1) == 1"]
    for bad in ({"inputs": [1]}, {"inputs": ["1"], "outputs": []}, "x = 1", 7):
        with pytest.raises(TestsError):
            parse_tests(bad)


# --- through the scorer ----------------------------------------------------------------------------
def test_stdin_stdout_tests_score_the_pass_rate_and_count_why_samples_failed():
    half = "a, b = map(int, open(0).read().split())\nprint(a + b if a < 3 else 0)"
    result = score([block(ADD_PROGRAM), block(half), block("print(1/0)"), "no code here",
                    block("def broken(:")], ADD)
    assert result.raw["code"][:2] == [1.0, pytest.approx(1 / 3)]
    assert result.raw["code"][2:] == [0.0, 0.0, 0.0]
    assert result.metrics["reward/code/failures/wrong_answer"] == 1.0
    assert result.metrics["reward/code/failures/runtime_error"] == 1.0
    assert result.metrics["reward/code/failures/no_code"] == 1.0
    assert result.metrics["reward/code/failures/syntax_error"] == 1.0
    assert result.metrics["reward/code/tests"] == 12.0
    assert result.metrics["reward/code/pass_rate"] == pytest.approx((1 + 1 / 3) / 5)


def test_function_call_tests_compare_the_returned_values_and_accept_a_solution_class():
    tests = {"fn_name": "add", "inputs": [[1, 2], [[1], [2]]], "outputs": [3, [[1, 2]]]}
    plain = block("def add(a, b):\n    return a + b")
    method = block("class Solution:\n    def add(self, a, b):\n        return a + b")
    wrong = block("def add(a, b):\n    return a - b")
    assert score([plain, method, wrong], tests).raw["code"] == [1.0, 1.0, 0.0]


def test_assert_tests_count_each_assert_and_all_pass_and_threshold_change_the_score():
    tests = ["assert square(2) == 4", "assert square(3) == 9", "assert square(-1) == 1", "assert square(0) == 1"]
    program = block("def square(x):\n    return x * x")  # passes 3 of 4
    assert score([program], tests).raw["code"] == [0.75]
    assert score([program], tests, score="all_pass").raw["code"] == [0.0]
    assert score([program], tests, threshold=0.8).raw["code"] == [0.0]
    assert score([program], tests, threshold=0.5).raw["code"] == [0.75]


def test_a_sample_that_times_out_scores_zero_or_none_and_only_that_sample():
    tests = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    loop = block("while True:\n    pass")
    result = score([block(ADD_PROGRAM), loop, block(ADD_PROGRAM)], tests)
    assert result.raw["code"] == [1.0, 0.0, 1.0]
    assert result.metrics["reward/code/failures/timeout"] == 1.0
    result = score([block(ADD_PROGRAM), loop], tests, on_timeout="none")
    assert result.raw["code"] == [1.0, None] and result.valid.tolist() == [True, False]


def test_rows_whose_tests_cannot_be_read_score_none():
    result = score([block("print(1)")], {"inputs": ["1"], "outputs": []})
    assert result.raw["code"] == [None] and result.metrics["reward/code/failures/bad_tests"] == 1.0


def test_the_isolation_the_sandbox_got_is_reported_as_metrics():
    result = score([block(ADD_PROGRAM)], ADD)
    for key in ("network_isolated", "readonly_fs", "separate_user"):
        assert result.metrics[f"reward/code/{key}"] in (0.0, 1.0)
    assert result.metrics["reward/code/isolation_level"] in (0.0, 1.0, 2.0, 3.0, 4.0)


def test_the_isolation_level_says_what_the_machine_gave():
    """bubblewrap where installed (3, 4 with a cgroup per sample); the fallback's namespaces (1, 2)."""
    from steadyrl.sandbox import cgroups
    from steadyrl.sandbox.view import bwrap_path

    fallback = load_reward("code", sandbox="namespaces")
    cgroup = 1 if cgroups.available() else 0
    assert fallback.metrics()["isolation_level"] == (1 + cgroup if fallback.isolation.get("pid") else 0)
    if bwrap_path() is None:
        with pytest.raises(ConfigError, match="sandbox='bwrap' but bubblewrap is not installed"):
            load_reward("code", sandbox="bwrap")
    else:
        assert load_reward("code", sandbox="bwrap").metrics()["isolation_level"] == 3 + cgroup


# --- start-up checks ---------------------------------------------------------------------------------
def test_the_reward_declares_its_tests_column_and_prefers_a_process_and_whole_batches():
    fn = load_reward("code", tests_key="input_output")
    assert fn.reads_columns == ("input_output",)
    assert fn.preferred_isolation == "process" and fn.preferred_chunk_size is None


@pytest.mark.parametrize("options, named", [
    ({"test_format": "junit"}, "test_format"), ({"score": "best"}, "score"), ({"threshold": 2}, "threshold"),
    ({"extract": "regex"}, "pattern"), ({"workers": 0}, "workers"), ({"backend": "docker"}, "backend"),
    ({"backend": "http"}, "url"), ({"python": "/no/such/python"}, "python"), ({"sandbox": "docker"}, "sandbox"),
    ({"python": ["python3"]}, r"python=\['python3'\]: Input should be a valid string"),
])
def test_bad_options_stop_at_start_up_naming_the_option(options, named):
    with pytest.raises(ConfigError, match=named):
        load_reward("code", **options)


def test_an_unreachable_sandbox_url_stops_at_start_up():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match="option url.*cannot connect"):
        load_reward("code", backend="http", url=url)


# --- backend: http (SandboxFusion's run_code) -----------------------------------------------------
def fake_sandbox_fusion(n, path, body):
    """Runs nothing: answers like SandboxFusion for the programs of the test below."""
    assert path == "/run_code" and body["language"] == "python" and body["run_timeout"] == 1.0
    code, stdin = body["code"], body["stdin"]
    if "while True" in code:
        return 200, {"status": "Failed", "run_result": {"status": "TimeLimitExceeded", "return_code": None,
                                                        "stdout": "", "stderr": ""}}
    if "__steadyrl_value__" in code:  # a function call: the driver prints the marker and the value
        value = 3 if "a + b" in code else -1
        return 200, {"status": "Success", "run_result": {"status": "Finished", "return_code": 0,
                                                         "stdout": f"\n__steadyrl_value__:{value}\n", "stderr": ""}}
    a, b = map(int, stdin.split())
    out = a + b if "a + b" in code else 0
    return 200, {"status": "Success", "run_result": {"status": "Finished", "return_code": 0, "stdout": f"{out}\n",
                                                     "stderr": ""}}


def test_the_http_backend_speaks_sandbox_fusions_run_code_and_maps_its_statuses():
    tests = {"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}
    with ScriptedServer(fake_sandbox_fusion, max_requests=20) as server:
        result = score([block(ADD_PROGRAM), block("print(0)"), block("while True: pass")], tests,
                       backend="http", url=server.url)
        calls = score([block("def f(a, b):\n    return a + b")], {"fn_name": "f", "inputs": [[1, 2]], "outputs": [3]},
                      backend="http", url=server.url)
    assert result.raw["code"] == [1.0, 0.0, 0.0]
    assert result.metrics["reward/code/failures/timeout"] == 1.0
    assert calls.raw["code"] == [1.0]
    assert len(server.requests) == 7 and "network_isolated" not in str(result.metrics)
    assert math.isfinite(result.metrics["reward/code/time_s"])
