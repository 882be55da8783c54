"""What a user sees of an agent (issue 33, item 8): a traceback once, secrets redacted, introduced
as the agent's (not a "reward function"); its tool calls in a transcript; the demo's reward not
added to the agent's."""

from types import SimpleNamespace

from steadyrl.demo.tool_task import format_transcript
from steadyrl.gateway.agent import _raised
from steadyrl.secrets import REDACTED, Secret


def _agent_code(key):
    raise PermissionError(f"the server refused key {key}")


def test_an_agent_that_raises_leaves_its_traceback_with_secrets_redacted():
    key = Secret("sk-test-0123456789abcdef").reveal()
    try:
        _agent_code(key)
    except PermissionError as err:
        text = _raised(err)
    assert text.startswith(f"the agent raised PermissionError: the server refused key {REDACTED}\n")
    assert "Traceback (most recent call last)" in text and "in _agent_code" in text
    assert key not in text


def test_the_failure_is_introduced_as_the_agents_not_a_reward_functions(capsys):
    from steadyrl.run.report import report_step

    result = SimpleNamespace(errors={"agent": "the agent raised RuntimeError: boom\nTraceback ..."})
    run = SimpleNamespace(state=SimpleNamespace(skipped_steps=0, warnings=0))
    report_step(run, 1, {}, {"result": result}, set(), 0)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "the agent (rollout.agent) failed on some episodes (shown once)" in text
    assert "reward function" not in text


def test_an_agents_tool_calls_show_in_the_transcript():
    turns = [{"role": "assistant", "content": "", "tool_calls": [
                 {"type": "function", "function": {"name": "calculate", "arguments": '{"expression": "347*29"}'}}]},
             {"role": "tool", "name": "calculate", "content": "10063"},
             {"role": "assistant", "content": "10063"}]
    lines = format_transcript("What is 347*29?", turns).splitlines()
    assert lines[1] == '  assistant: [call] calculate({"expression": "347*29"})'  # it was an empty "assistant:"
    assert lines[2] == "  tool (calculate): 10063"


def test_the_demo_with_an_agent_scores_with_the_agents_reward_alone():
    from steadyrl.config import load_config
    from steadyrl.demo.builders import DemoTask

    config = load_config(None, ["demo.task=tool", "rollout.tools=[]",
                                "rollout.agent=examples/calculator_agent.py:run_episode"])
    *_, specs = DemoTask().records(config, for_eval=False, quiet=True)
    assert specs == []  # as rewards: [] on a data task: a correct episode scores 1, not 1 + the demo's 1
