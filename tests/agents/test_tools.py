"""Loading tools from user code (schemas from type hints and docstrings) and running them."""

import textwrap

import pytest

from steadyrl.agents.tools import Tool, ToolArgumentError, load_tools, run_tool, tool_schemas, tools_by_name
from steadyrl.errors import ConfigError

TOOLS_PY = '''
from typing import Literal, Optional


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b


def search(query: str, limit: Optional[int] = None, mode: Literal["fast", "exact"] = "fast") -> list:
    """Search the notes.

    Args:
        query: what to look for
        limit: at most this many results
        mode: how to match
    """
    return [{"query": query, "limit": limit, "mode": mode}]


def mean(values: list[float]) -> float:
    """The mean of some numbers.

    Args:
        values: the numbers
    """
    return sum(values) / len(values)


def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: the text
    """
    return text.upper()


def boom(x: int) -> int:
    """Always fails.

    Args:
        x: ignored
    """
    raise RuntimeError("boom " + str(x))


def no_hints(a, b):
    """Add.

    Args:
        a: one
        b: two
    """
    return a + b


def no_doc(a: int) -> int:
    return a


NOT_CALLABLE = 42
'''


@pytest.fixture
def tools_file(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text(TOOLS_PY)
    return path


@pytest.fixture
def tools(tools_file):
    return tools_by_name(load_tools([f"{tools_file}:{n}" for n in ("add", "search", "mean", "shout", "boom")]))


def test_load_tools_builds_openai_style_schemas_from_hints_and_docstrings(tools_file):
    [add] = load_tools([f"{tools_file}:add"])
    assert isinstance(add, Tool) and add.name == "add" and add.fn(1, 2) == 3
    assert add.schema["type"] == "function"
    function = add.schema["function"]
    assert function["name"] == "add" and function["description"] == "Add two integers."
    assert function["parameters"]["properties"]["a"] == {"type": "integer", "description": "the first addend"}
    assert function["parameters"]["required"] == ["a", "b"]
    assert tool_schemas([add]) == [add.schema]


def test_load_tools_accepts_a_module_spec(tmp_path, monkeypatch):
    (tmp_path / "agent_tools_pkg").mkdir()
    (tmp_path / "agent_tools_pkg" / "__init__.py").write_text("")
    (tmp_path / "agent_tools_pkg" / "calc.py").write_text(TOOLS_PY)
    monkeypatch.syspath_prepend(str(tmp_path))
    [tool] = load_tools(["agent_tools_pkg.calc:shout"])
    assert tool.name == "shout" and run_tool(tool, {"text": "a"}) == "A"


@pytest.mark.parametrize("attr, why", [
    ("no_hints", "missing a type hint"),
    ("no_doc", "has no docstring"),
    ("NOT_CALLABLE", "not a callable"),
    ("nothing", "has no attribute 'nothing'"),
])
def test_a_bad_tool_names_its_index_value_and_problem(tools_file, attr, why):
    spec = f"{tools_file}:{attr}"
    with pytest.raises(ConfigError) as err:
        load_tools([f"{tools_file}:add", spec])
    message = str(err.value)
    assert message.startswith(f"rollout.multi_turn.tools[1]={spec!r}: ")
    assert why in message


def test_a_missing_tool_file_or_module_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"rollout.multi_turn.tools\[0\].*does not exist"):
        load_tools([f"{tmp_path}/absent.py:f"])
    with pytest.raises(ConfigError, match=r"rollout.multi_turn.tools\[0\].*no module named 'no_such_pkg'"):
        load_tools(["no_such_pkg.tools:f"])


def test_a_tool_spec_without_a_colon_is_refused():
    with pytest.raises(ConfigError, match=r"rollout.multi_turn.tools\[0\]='add': expected 'package.module:function'"):
        load_tools(["add"])


def test_two_tools_with_one_name_are_refused(tools_file, tmp_path):
    other = tmp_path / "other.py"
    other.write_text(textwrap.dedent('''
        def add(x: int) -> int:
            """Other add.

            Args:
                x: a number
            """
            return x
    '''))
    with pytest.raises(ConfigError, match=r"rollout.multi_turn.tools\[1\].*second tool named 'add'.*rollout.multi_turn.tools\[0\]"):
        load_tools([f"{tools_file}:add", f"{other}:add"])


@pytest.mark.parametrize("name, counts", [("parse", "malformed tool calls"),
                                          ("unknown", "calls to tools that do not exist"),
                                          ("max_calls", "calls past rollout.multi_turn.max_tool_calls_per_turn"),
                                          ("time_budget", "calls past their turn's rollout.multi_turn.tool_time_budget_s")])
def test_a_tool_named_like_an_error_counter_is_refused(tmp_path, name, counts):
    path = tmp_path / "clash.py"
    path.write_text(textwrap.dedent(f'''
        def {name}(text: str) -> str:
            """Read a text.

            Args:
                text: the text
            """
            return text
    '''))
    with pytest.raises(ConfigError) as err:
        load_tools([f"{path}:{name}"])
    message = str(err.value)
    assert message.startswith(f"rollout.multi_turn.tools[0]='{path}:{name}': the function is named '{name}'")
    assert f"rollout/tool_errors/{name} counts {counts}" in message and "\n" not in message


def test_tools_must_be_a_list():
    with pytest.raises(ConfigError, match="rollout.multi_turn.tools="):
        load_tools("my_tools.py:add")


def test_run_tool_calls_the_function_and_returns_text(tools):
    assert run_tool(tools["add"], {"a": 2, "b": 3}) == "5"
    assert run_tool(tools["shout"], {"text": "hi"}) == "HI"  # a str is returned as is, not quoted
    assert run_tool(tools["search"], {"query": "q"}) == '[{"query": "q", "limit": null, "mode": "fast"}]'
    assert run_tool(tools["mean"], {"values": [1, 2.5]}) == "1.75"


@pytest.mark.parametrize("tool, arguments, why", [
    ("add", {"a": 1}, "missing required argument(s) ['b']"),
    ("add", {"a": 1, "b": 2, "c": 3}, "unknown argument(s) ['c']; its arguments are ['a', 'b']"),
    ("add", {"a": "1", "b": 2}, "argument 'a' must be of type integer, got \"1\""),
    ("add", {"a": True, "b": 2}, "argument 'a' must be of type integer"),
    ("add", {"a": 1.5, "b": 2}, "argument 'a' must be of type integer"),
    ("search", {"query": "q", "mode": "slow"}, "argument 'mode' must be one of ['fast', 'exact']"),
    ("mean", {"values": [1, "x"]}, "argument 'values'[1] must be of type number"),
    ("add", [1, 2], "arguments must be a JSON object"),
])
def test_run_tool_refuses_arguments_the_schema_does_not_allow(tools, tool, arguments, why):
    with pytest.raises(ToolArgumentError) as err:
        run_tool(tools[tool], arguments)
    assert f"tool {tool!r}: " in str(err.value)
    assert why in str(err.value)


def test_run_tool_accepts_null_for_an_optional_argument(tools):
    assert '"limit": null' in run_tool(tools["search"], {"query": "q", "limit": None})


def test_exceptions_from_the_tool_propagate(tools):
    with pytest.raises(RuntimeError, match="boom 3"):
        run_tool(tools["boom"], {"x": 3})


def test_a_file_holding_a_reward_and_a_tool_is_executed_once(tmp_path):
    from steadyrl.rewards.loader import load_reward

    path = tmp_path / "shared.py"
    path.write_text(TOOLS_PY + textwrap.dedent('''
        RUNS = globals().get("RUNS", 0) + 1

        def reward(prompts, completions, **columns):
            return [float(RUNS)] * len(completions)
    '''))
    [tool] = load_tools([f"{path}:add"])
    reward = load_reward(f"{path}:reward")
    assert reward(["p"], ["c"]) == [1.0]
    assert tool.fn.__globals__ is reward.func.__globals__  # one module: state is shared


# --- how many calls a turn may make, and how long they may take together (issue 25 item 4) -----------------

def _call(tool: str, **arguments) -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': tool, 'arguments': arguments})}\n</tool_call>"


def _agent(fn, **kwargs):
    from transformers.utils import get_json_schema

    from steadyrl.agents.parsers import load_parser
    from steadyrl.agents.toolagent import ToolAgent

    return ToolAgent([Tool(fn.__name__, fn, get_json_schema(fn))], load_parser("hermes"), **kwargs)


def test_calls_past_max_tool_calls_per_turn_are_answered_with_an_error_and_counted():
    ran = []

    def note(x: int) -> int:
        """Note a number.

        Args:
            x: the number
        """
        ran.append(x)
        return x

    agent = _agent(note, timeout_s=5, isolation="inline", max_calls_per_turn=3)
    [reply] = agent.respond([None], ["".join(_call("note", x=i) for i in range(12))])
    assert ran == [0, 1, 2]
    assert reply.tool_calls == 12 and reply.tool_errors == {"max_calls": 9} and not reply.done
    contents = [m["content"] for m in reply.messages]
    assert contents[:3] == ["0", "1", "2"] and len(contents) == 12
    assert all("at most 3 tool calls" in c and "rollout.multi_turn.max_tool_calls_per_turn" in c for c in contents[3:])


def test_every_episodes_first_call_runs_before_any_episodes_second():
    order = []

    def note(x: str) -> str:
        """Note a name.

        Args:
            x: the name
        """
        order.append(x)
        return x

    agent = _agent(note, timeout_s=5, isolation="inline")
    agent.respond([None, None], ["".join(_call("note", x=f"a{i}") for i in range(3)), _call("note", x="b0")])
    assert order == ["a0", "b0", "a1", "a2"]


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_forty_calls_to_a_hanging_tool_end_within_the_turns_time_budget(isolation):
    import time

    def hang(seconds: float) -> str:
        """Sleep.

        Args:
            seconds: how long
        """
        time.sleep(seconds)
        return "woke"

    agent = _agent(hang, timeout_s=2.0, isolation=isolation, workers=4, max_calls_per_turn=None, time_budget_s=3.0)
    try:
        [reply] = agent.respond([None], ["".join(_call("hang", seconds=30) for _ in range(40))])
    finally:
        agent.shutdown()
    # the turn's 3 s budget ends it, not 40 calls / 4 workers * 2 s = 20 s: which limit fired says so
    assert len(reply.messages) == 40 and sum(reply.tool_errors.values()) == 40
    if isolation == "process":  # waves of 4 workers: the first is cut at 2 s, the second at 3 s, the rest never run
        assert reply.tool_errors.get("time_budget", 0) >= 36
        assert "rollout.multi_turn.tool_time_budget_s" in reply.messages[-1]["content"]
    else:  # a thread each, all at once: each one's own 2 s limit comes first
        assert reply.tool_errors == {"hang": 40}


def test_the_defaults_cap_a_turn_at_eight_calls_and_sixty_seconds():
    from steadyrl.config.schema import RolloutConfig

    mt = RolloutConfig().multi_turn
    assert (mt.max_tool_calls_per_turn, mt.tool_time_budget_s) == (8, 60.0)
    unset = {"max_tool_calls_per_turn": None, "tool_time_budget_s": None}
    assert RolloutConfig(multi_turn=unset).multi_turn.tool_time_budget_s is None
