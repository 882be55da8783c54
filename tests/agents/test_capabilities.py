"""What the step asks of an agent is declared on it (``Agent``'s capabilities, defaults on
``AgentBase``), never probed with ``getattr``: every agent class has every capability."""

import ast
from pathlib import Path

import pytest

from steadyrl.agents.environment import EnvironmentAgent
from steadyrl.agents.protocol import AgentBase
from steadyrl.agents.toolagent import ToolAgent
from steadyrl.gateway import GatewayAgent

CAPABILITIES = ("multi_turn_mode", "drives_episodes", "splits_trajectories", "tools", "tool_schemas", "parser")
PACKAGE = Path(__file__).resolve().parents[2] / "steadyrl"


@pytest.mark.parametrize("cls", [ToolAgent, EnvironmentAgent, GatewayAgent], ids=lambda c: c.__name__)
def test_every_agent_class_declares_every_capability(cls):
    assert issubclass(cls, AgentBase)
    assert all(hasattr(cls, name) for name in CAPABILITIES)


def test_only_the_gateway_drives_its_episodes_and_splits_trajectories():
    assert GatewayAgent.drives_episodes and GatewayAgent.splits_trajectories
    assert not (ToolAgent.drives_episodes or EnvironmentAgent.drives_episodes)
    assert AgentBase.multi_turn_mode == "single" and dict(AgentBase.tools) == {}


def test_nothing_probes_an_agent_with_getattr():
    probes = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2 and "agent" in ast.unparse(node.args[0]).lower()):
                probes.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {ast.unparse(node)}")
    assert probes == []
