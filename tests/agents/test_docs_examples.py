"""The examples of docs/agents.md run as written: the tool's schema is the JSON shown, the custom
parser parses, and the environment example survives what a policy really writes (any text)."""

import json
import re
from pathlib import Path

from transformers.utils import get_json_schema

from steadyrl.agents.environment import EnvironmentAgent
from steadyrl.agents.parsers import load_parser

DOC = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text()


def example(name: str) -> str:
    return re.search(rf"```python\n# {re.escape(name)}\n(.*?)```", DOC, re.S).group(1)


def test_the_tool_example_has_the_schema_shown():
    namespace = {}
    exec(example("my_tools.py"), namespace)
    shown = json.loads(re.search(r"```json\n(.*?)```", DOC, re.S).group(1))
    assert get_json_schema(namespace["add"]) == shown


def test_the_parser_example_reads_its_calls(tmp_path):
    (tmp_path / "my_parser.py").write_text(example("my_parser.py"))
    turn = load_parser(f"{tmp_path / 'my_parser.py'}:parse")('Adding.\nCALL add {"a": 1, "b": 2}')
    assert [(c.name, c.arguments) for c in turn.calls] == [("add", {"a": 1, "b": 2})]


def test_the_environment_example_takes_any_text_without_failing(tmp_path):
    (tmp_path / "my_env.py").write_text(example("my_env.py"))
    from steadyrl.agents.environment import load_environment

    agent = EnvironmentAgent(load_environment(f"{tmp_path / 'my_env.py'}:Guess"), observation_role="user",
                             timeout_s=5, isolation="inline")
    rows = [{"prompt": "Guess my number.", "answer": "7"}] * 4
    states = [s.state for s in agent.start(rows, [0, 1, 2, 3])]
    replies = agent.respond(states, ["AmEg,vF", "", "3", "7"])
    assert [r.failed for r in replies] == [False] * 4
    assert [(r.messages[0]["content"] if r.messages else None, r.reward, r.done) for r in replies] == [
        ("answer with a number", 0.0, False), ("answer with a number", 0.0, False), ("higher", 0.0, False),
        (None, 1.0, True)]
    agent.close(states)
