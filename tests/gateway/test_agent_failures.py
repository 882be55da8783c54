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
    assert "the agent (rollout.multi_turn.agent) failed on some episodes (shown once)" in text
    assert "reward function" not in text


def test_an_agents_tool_calls_show_in_the_transcript():
    turns = [{"role": "assistant", "content": "", "tool_calls": [
                 {"type": "function", "function": {"name": "calculate", "arguments": '{"expression": "347*29"}'}}]},
             {"role": "tool", "name": "calculate", "content": "10063"},
             {"role": "assistant", "content": "10063"}]
    lines = format_transcript("What is 347*29?", turns).splitlines()
    assert lines[1] == '  assistant: [call] calculate({"expression": "347*29"})'  # it was an empty "assistant:"
    assert lines[2] == "  tool (calculate): 10063"


def test_on_the_demo_an_agents_number_is_the_score_alone_and_none_is_left_to_the_demos_reward():
    import torch

    from steadyrl.rewards.scorer import score_episodes
    from steadyrl.rewards.scoring import ScoreResult

    class DemoReward:  # what the demo's answer reward said: both episodes right
        agent_fallback = True

        def __call__(self, samples, completions, ids, extra_columns=None, chat_completions=None):
            return ScoreResult(names=["answer"], weights={"answer": 1.0}, raw={"answer": [1.0, 1.0]},
                               scores=torch.tensor([1.0, 1.0], dtype=torch.float64),
                               valid=torch.tensor([True, True]), failures={"answer": {}})

    episodes = [SimpleNamespace(gateway=True, failed=False, error=None, agent_reward=1.0, messages=[], chat=[]),
                SimpleNamespace(gateway=True, failed=False, error=None, agent_reward=None, messages=[], chat=[])]
    gen = SimpleNamespace(episodes=episodes, completions=["a", "b"], response_ids=torch.ones(2, 1, dtype=torch.long),
                          response_mask=torch.ones(2, 1, dtype=torch.long))
    result = score_episodes(DemoReward(), [None, None], gen, environment=False)
    assert result.scores.tolist() == [1.0, 1.0]  # the agent's 1 alone (it was 2), and the demo's 1 for None
    assert result.valid.tolist() == [True, True]
