"""load_reward: built-in names, module:function and file.py:function specs, and their errors."""

import sys
import textwrap

import pytest

from steadyrl.errors import ConfigError, RewardLoadError
from steadyrl.rewards import RewardSpec, load_reward, reward_name, score_batch

USER_MODULE = textwrap.dedent(
    '''
    CALLS = []
    NOT_CALLABLE = 3


    def contains_answer(prompts, completions, answer=None, bonus=0.0, **kwargs):
        CALLS.append(len(completions))
        return [float(str(a) in c) + bonus for c, a in zip(completions, answer)]


    def no_kwargs(prompts, completions):
        return [1.0] * len(completions)


    class Scorers:
        @staticmethod
        def half(prompts, completions, **kwargs):
            return [0.5] * len(completions)
    '''
)


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(USER_MODULE)
    return path


def test_a_builtin_name_gives_its_factory_product():
    fn = load_reward("exact_match")
    assert fn(["q"], ["4"], answer=["4"]) == [1.0]


def test_a_misspelt_builtin_suggests_the_nearest_name():
    with pytest.raises(RewardLoadError, match="'maht'.*did you mean 'math'") as info:
        load_reward("maht")
    assert isinstance(info.value, ConfigError)  # exit status 2
    assert "module:function" in str(info.value)


def test_unknown_and_missing_builtin_options_list_the_valid_ones():
    with pytest.raises(RewardLoadError, match=r"answer_column='x': unknown option of the math reward; "
                                              r"did you mean 'answer_key'\? valid options: answer_key, gold_marker"):
        load_reward("math", answer_column="x")
    with pytest.raises(RewardLoadError, match=r"option pattern: required by the regex_format reward"):
        load_reward("regex_format")


def test_a_file_spec_loads_relative_to_the_current_directory(user_file, monkeypatch):
    monkeypatch.chdir(user_file.parent)
    fn = load_reward("my_rewards.py:contains_answer")
    assert fn(["q", "q"], ["it is 42", "it is 41"], answer=[42, 42], extra=["x", "y"]) == [1.0, 0.0]
    assert fn.func is load_reward(f"{user_file}:contains_answer").func  # absolute path, same module object


def test_a_user_reward_names_the_columns_it_requires(user_file, tmp_path):
    """Its keyword parameters without a default are dataset columns: checked against the data
    before a run starts (``reads_columns``), unless the function names them itself."""
    assert load_reward(f"{user_file}:contains_answer").reads_columns == ()  # answer=None: optional
    path = tmp_path / "needs.py"
    path.write_text("def graded(prompts, completions, solution, *, rubric, **kw):\n    return [0.0] * len(completions)\n"
                    "def declared(prompts, completions, **kw):\n    return [0.0] * len(completions)\n"
                    "declared.reads_columns = ('answer', 'level')\n")
    assert load_reward(f"{path}:graded").reads_columns == ("solution", "rubric")
    assert load_reward(f"{path}:declared").reads_columns == ("answer", "level")


def test_options_of_a_user_function_are_bound_as_keyword_arguments(user_file):
    fn = load_reward(f"{user_file}:contains_answer", bonus=0.5)
    assert fn(["q"], ["42"], answer=["42"]) == [1.5]


def test_a_module_spec_imports_from_sys_path(user_file, monkeypatch):
    monkeypatch.syspath_prepend(str(user_file.parent))
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)
    fn = load_reward("my_rewards:contains_answer")
    assert fn(["q"], ["7"], answer=["7"]) == [1.0]
    assert load_reward("my_rewards:Scorers.half")(["q"], ["x"]) == [0.5]
    assert reward_name("my_rewards:Scorers.half") == "half"


def test_a_missing_module_names_it(monkeypatch):
    with pytest.raises(RewardLoadError, match="no module named 'surely_not_a_module_xyz'.*PYTHONPATH"):
        load_reward("surely_not_a_module_xyz:fn")


def test_a_missing_file_names_its_absolute_path(tmp_path):
    with pytest.raises(RewardLoadError, match="does not exist") as info:
        load_reward(f"{tmp_path}/nope.py:fn")
    assert str(tmp_path / "nope.py") in str(info.value)


def test_a_file_that_fails_to_import_reports_the_error(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("import math\nx = 1 / 0\n")
    with pytest.raises(RewardLoadError, match="raised ZeroDivisionError: division by zero"):
        load_reward(f"{bad}:fn")
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def f(:\n")
    with pytest.raises(RewardLoadError, match="SyntaxError"):
        load_reward(f"{syntax}:f")


def test_a_missing_attribute_suggests_the_nearest_callable(user_file):
    with pytest.raises(RewardLoadError, match="no attribute 'contains_anwser'.*did you mean 'contains_answer'"):
        load_reward(f"{user_file}:contains_anwser")


def test_a_non_callable_attribute_is_refused(user_file):
    with pytest.raises(RewardLoadError, match="'NOT_CALLABLE' is a int, not a callable"):
        load_reward(f"{user_file}:NOT_CALLABLE")


def test_a_function_without_kwargs_receives_only_what_it_names(user_file):
    """No **kwargs: the columns it does not name are not passed (they used to make it refused)."""
    spec = RewardSpec.load(f"{user_file}:no_kwargs")
    result = score_batch([spec], ["q", "q"], ["a", "b"], {"answer": ["a", "x"], "level": [1, 2]}, isolation="inline")
    assert result.raw["no_kwargs"] == [1.0, 1.0] and result.failures["no_kwargs"]["exception"] == 0


def test_options_a_function_without_kwargs_has_no_parameter_for_are_refused(user_file):
    with pytest.raises(RewardLoadError, match=r"option\(s\) \['bogus'\] are not parameters.*\(prompts, completions\)"):
        load_reward(f"{user_file}:no_kwargs", bogus=1)


@pytest.mark.parametrize("spec", ["", "   ", ":fn", "module:"])
def test_malformed_specs_are_refused(spec):
    with pytest.raises(RewardLoadError):
        load_reward(spec)


def test_reward_spec_load_names_and_validates(user_file):
    spec = RewardSpec.load(f"{user_file}:contains_answer", weight=2.0, timeout_s=5)
    assert (spec.name, spec.weight, spec.timeout_s) == ("contains_answer", 2.0, 5)
    assert RewardSpec.load("regex_format", pattern="x").name == "regex_format"
    with pytest.raises(ConfigError, match="weight=nan"):
        RewardSpec("r", spec.fn, weight=float("nan"))
    with pytest.raises(ConfigError, match="timeout_s=0"):
        RewardSpec("r", spec.fn, timeout_s=0)
    with pytest.raises(ConfigError, match="isolation='fork'"):
        RewardSpec("r", spec.fn, isolation="fork")
    with pytest.raises(ConfigError, match="without '/'"):
        RewardSpec("a/b", spec.fn)


def test_reward_isolation_settings_in_a_config_reach_the_reward_spec(tmp_path):
    from steadyrl.config import load_config
    from steadyrl.sandbox import Limits
    from steadyrl.assembly.task import build_rewards

    path = tmp_path / "run.yaml"
    path.write_text("rewards:\n  - name: exact_match\n    chunk_size: null\n    env_passthrough: [OPENAI_*]\n"
                    "    limits: {memory_mb: 512, processes: null}\n")
    (spec,) = build_rewards(load_config(str(path), []), [])
    assert spec.chunk_size is None and spec.env_passthrough == ("OPENAI_*",)
    assert spec.limits == Limits(memory_mb=512, processes=None)
    path.write_text("rewards:\n  - name: exact_match\n    limits: {memory: 512}\n")
    with pytest.raises(ConfigError, match="did you mean 'rewards\\[0\\].limits.memory_mb'"):
        load_config(str(path), [])
