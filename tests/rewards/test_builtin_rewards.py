"""The built-in verifiers on real answer strings, with the real math-verify library."""

import pytest

from steadyrl.errors import ConfigError
from steadyrl.rewards import BUILTIN_REWARDS, load_reward, normalize_answer


@pytest.fixture(scope="module")
def math_fn():
    return load_reward("math")


def score(fn, completions, answers, **extra):
    return fn(["q"] * len(completions), completions, answer=answers, **extra)


def test_registry_has_the_five_builtins():
    assert {"math", "exact_match", "normalized_match", "regex_format", "length_penalty"} <= set(BUILTIN_REWARDS)


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        ("so the result is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
        ("The answer is 1234", "#### 1,234", 1.0),
        ("The answer is 1,234.", "1234", 1.0),
        ("She sold 48/2 = 24 in May, so 48+24 = 72 clips.", "Natalia sold 48/2 = 24 clips.\n#### 72", 1.0),
        ("\\boxed{2\\sqrt{2}}", "2\\sqrt{2}", 1.0),
        ("\\boxed{2}", "2\\sqrt{2}", 0.0),  # a bare gold is read whole, not as its first number
        ("we get $x = \\frac{3}{4}$, i.e. \\boxed{\\frac{3}{4}}", "$0.75$", 1.0),
        ("The answer is 17.", "#### 18", 0.0),
        ("I do not know.", "42", 0.0),
        ("\\boxed{1+x^2}", "x^2+1", 1.0),
    ],
)
def test_math_verifies_equivalent_answers(math_fn, completion, gold, expected):
    assert score(math_fn, [completion], [gold]) == [expected]


@pytest.mark.parametrize("gold", [None, "", "####   ", "#### "])
def test_math_gives_none_not_zero_when_the_gold_cannot_be_parsed(math_fn, gold):
    assert score(math_fn, ["\\boxed{5}"], [gold]) == [None]


def test_math_accepts_integer_gold_and_a_group_sharing_one_gold(math_fn):
    out = score(math_fn, ["\\boxed{72}", "71", "the answer is 72"], [72, 72, 72])
    assert out == [1.0, 0.0, 1.0]


def test_math_reads_another_gold_column_and_names_a_missing_one():
    fn = load_reward("math", answer_key="solution")
    assert fn(["q"], ["\\boxed{3}"], solution=["3"], other=["x"]) == [1.0]
    with pytest.raises(KeyError, match="'solution'.*answer_key"):
        fn(["q"], ["\\boxed{3}"], answer=["3"])


def test_exact_match_strips_but_is_case_sensitive():
    fn = load_reward("exact_match")
    assert score(fn, ["  Paris\n", "paris", "Paris."], ["Paris", "Paris", "Paris"]) == [1.0, 0.0, 0.0]
    assert score(load_reward("exact_match", strip=False), [" Paris"], ["Paris"]) == [0.0]


def test_normalized_match_folds_case_whitespace_and_trailing_punctuation():
    fn = load_reward("normalized_match")
    assert score(fn, ["  The   Eiffel\tTower. ", "eiffel tower!", "The Louvre"], ["the eiffel tower"] * 3) == [
        1.0, 0.0, 0.0,
    ]
    assert normalize_answer("  New\n York City?! ") == "new york city"


def test_match_rewards_take_the_text_after_a_marker_on_both_sides():
    fn = load_reward("normalized_match", marker="####")
    out = score(fn, ["work...\n#### 72\n", "no marker here 72", "#### 71"], ["steps\n#### 72"] * 3)
    assert out == [1.0, 0.0, 0.0]
    fn = load_reward("exact_match", marker="Answer:")
    assert score(fn, ["Reasoning.\nAnswer: Paris\nHope this helps"], ["Paris"]) == [1.0]


def test_match_rewards_can_take_the_last_line():
    fn = load_reward("normalized_match", last_line=True)
    assert score(fn, ["Let me think.\n\nParis.\n\n", "Paris\nbut really Rome"], ["paris", "paris"]) == [1.0, 0.0]


def test_match_rewards_score_none_for_a_missing_gold():
    assert score(load_reward("exact_match"), ["x", "y"], [None, "y"]) == [None, 1.0]


def test_marker_and_last_line_together_is_a_config_error():
    with pytest.raises(ConfigError, match="marker.*last_line"):
        load_reward("normalized_match", marker="####", last_line=True)


def test_regex_format_checks_the_think_answer_layout():
    fn = load_reward("regex_format", pattern=r"<think>.*</think>\s*<answer>.*</answer>")
    completions = [
        "<think>\nstep 1\nstep 2\n</think>\n<answer>42</answer>",
        "  <think>x</think><answer>y</answer>\n",
        "<answer>42</answer>",
        "text before <think>x</think><answer>y</answer>",
    ]
    assert fn(["q"] * 4, completions) == [1.0, 1.0, 0.0, 0.0]
    search = load_reward("regex_format", pattern=r"<answer>\d+</answer>", mode="search")
    assert search(["q"], ["blah <answer>7</answer> blah"]) == [1.0]
    full = load_reward("regex_format", pattern=r"<answer>\d+</answer>", mode="fullmatch")
    assert full(["q"], ["<answer>7</answer> and more"]) == [0.0]


def test_regex_format_rejects_a_bad_pattern_flag_or_mode():
    with pytest.raises(ConfigError, match="pattern='\\(' is not a valid regular expression"):
        load_reward("regex_format", pattern="(")
    with pytest.raises(ConfigError, match="unknown flag 'DOTAL'"):
        load_reward("regex_format", pattern="x", flags="DOTAL")
    with pytest.raises(ConfigError, match="mode='find'"):
        load_reward("regex_format", pattern="x", mode="find")
    # options of the wrong type are config errors too (no AttributeError / ValueError from re)
    with pytest.raises(ConfigError, match=r"flags=\['DOTALL'\]: Input should be a valid string or a valid integer"):
        load_reward("regex_format", pattern="x", flags=["DOTALL"])
    with pytest.raises(ConfigError, match="flags=-1 is not a sum of re flags"):
        load_reward("regex_format", pattern="x", flags=-1)
    with pytest.raises(ConfigError, match="flags='LOCALE' does not go with a text pattern"):
        load_reward("regex_format", pattern="x", flags="LOCALE")


def test_regex_format_flags_from_a_string():
    fn = load_reward("regex_format", pattern="^answer", flags="IGNORECASE|MULTILINE", mode="search")
    assert fn(["q"], ["first line\nANSWER: 3"]) == [1.0]


def test_length_penalty_is_zero_to_target_then_linear_down_to_minus_one():
    fn = load_reward("length_penalty", target_length=10, max_length=20)
    out = fn(["q"] * 5, ["a" * 5, "a" * 10, "a" * 15, "a" * 20, "a" * 500])
    assert out == [0.0, 0.0, -0.5, -1.0, -1.0]
    words = load_reward("length_penalty", target_length=2, max_length=6, unit="words")
    assert words(["q"], ["one two three four"]) == [-0.5]


def test_length_penalty_counts_tokens_with_a_tokenizer(char_tokenizer):
    fn = load_reward("length_penalty", target_length=4, max_length=8, unit="tokens", tokenizer=char_tokenizer)
    assert fn(["q"] * 2, ["abcd", "abcdef"]) == [0.0, -0.5]  # special tokens are not counted


@pytest.mark.parametrize(
    "options, match",
    [
        ({"target_length": 10, "max_length": 10}, "max_length=10 must be greater than target_length=10"),
        ({"target_length": -1, "max_length": 10}, "target_length=-1"),
        ({"target_length": 1, "max_length": 10, "unit": "bytes"}, "unit='bytes'"),
        ({"target_length": 1, "max_length": 10, "unit": "tokens"}, "tokenizer is needed"),
    ],
)
def test_length_penalty_option_errors_name_the_option(options, match):
    with pytest.raises(ConfigError, match=match):
        load_reward("length_penalty", **options)


@pytest.mark.parametrize("text", [
    "9^9^9^9", "\\boxed{9^{9^{9^{9}}}}", "9**9**9**9", "the answer is 9^(9^9)", "\\boxed{x^{100000000}}",
    "\\boxed{(x+y+1)^{100}}", "\\boxed{100000!}", "\\boxed{" + "1+" * 600 + "1}", "x" * 100_001,
])
def test_math_screens_answers_that_would_stall_sympy(text):
    from steadyrl.rewards.math_verifier import pathological

    assert pathological(text) is not None


@pytest.mark.parametrize("text", [
    "\\boxed{2^{2023}}", "2**3**2", "$e^{-x^2}$", "\\boxed{(x+1)^{2}}", "\\boxed{5!}", "\\boxed{10^{18}}",
    "So the total is \\boxed{72}.", "9" * 5000 + "^" + " " * 20000,
])
def test_math_lets_ordinary_answers_through_the_screen(text):
    from steadyrl.rewards.math_verifier import pathological

    assert pathological(text) is None


def test_a_power_tower_scores_zero_and_its_gold_none(math_fn):
    assert score(math_fn, ["9^9^9^9", "\\boxed{72}"], ["72", "9^{9^{9^{9}}}"]) == [0.0, None]


def test_a_power_tower_under_thread_isolation_does_not_stall_the_trainer():
    """A thread cannot be stopped and sympy's big-integer power holds the interpreter lock, so
    without the screen this stalls the whole process for minutes (a subprocess bounds the test)."""
    import subprocess
    import sys

    code = (
        "import math_verify\n"
        "from steadyrl.rewards import RewardSpec, score_batch\n"
        "seen, parse = [], math_verify.parse\n"
        "math_verify.parse = lambda text, *a, **k: (seen.append(text), parse(text, *a, **k))[1]\n"
        "spec = RewardSpec.load('math', timeout_s=30, isolation='thread')\n"
        "r = score_batch([spec], ['q', 'q'], ['9^9^9^9', '\\\\boxed{9^{9^{9^{9}}}}'], {'answer': ['72', '72']})\n"
        "print(r.raw['math'], sum('9^' in str(t) for t in seen))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    scores, towers_parsed = out.stdout.split("]")
    # the screen refuses both towers before sympy sees them: no tower ever reaches math_verify.parse
    assert scores == "[0.0, 0.0" and int(towers_parsed) == 0


def test_math_parses_each_gold_answer_once_across_one_sample_calls(monkeypatch):
    from steadyrl.rewards import math_verifier

    fn = load_reward("math")  # a fresh cache
    parsed = []
    real = math_verifier.parse_gold
    monkeypatch.setattr(math_verifier, "parse_gold", lambda gold, **kw: parsed.append(gold) or real(gold, **kw))
    for completion in ["\\boxed{72}", "71", "72"]:  # a group, scored one sample per call
        score(fn, [completion], ["#### 72"])
    assert parsed == ["#### 72"]
