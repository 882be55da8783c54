"""Trust, round 4, item 4: when the agent's calls to the gateway fail (503, a dropped connection),
the run says so. It stopped saying "every sample failed a reward function — fix the reward function
or the data" while its agent had got 503 on every call."""

from __future__ import annotations

import socket
import urllib.error
from types import SimpleNamespace

import pytest
import torch

from steadyrl.agents.parsers import load_parser
from steadyrl.errors import TrainingHalted
from steadyrl.gateway import GatewayAgent
from steadyrl.gateway import agent as agent_module
from steadyrl.gateway.agent import call_failure
from steadyrl.gateway.server import Gateway, ServerLimits
from steadyrl.rewards.scorer import Scorer, score_episodes
from steadyrl.rollout.episodes import TurnLimits, episode_metrics
from steadyrl.run import report

from .conftest import make_prompts

GATEWAY = "http://127.0.0.1:4321/"
AT_GATEWAY = "http://127.0.0.1:4321/e/tok/v1/chat/completions"


def _status_error(status: int, url: str = AT_GATEWAY):
    """What the ``openai`` client raises for an HTTP error answer."""
    openai, httpx = pytest.importorskip("openai"), pytest.importorskip("httpx")
    response = httpx.Response(status, request=httpx.Request("POST", url), json={"error": {"message": "busy"}})
    return openai.APIStatusError("busy", response=response, body=None)


def _connection_error(timeout: bool = False):
    openai, httpx = pytest.importorskip("openai"), pytest.importorskip("httpx")
    return (openai.APITimeoutError if timeout else openai.APIConnectionError)(request=httpx.Request("POST", AT_GATEWAY))


def _disconnected():
    return pytest.importorskip("httpx").RemoteProtocolError("Server disconnected without sending a response.")


def _raised_from(cause: BaseException) -> RuntimeError:
    """What an agent framework raises: its own error, from the client's."""
    try:
        try:
            raise cause
        except BaseException as err:
            raise RuntimeError("the episode could not continue") from err
    except RuntimeError as wrapped:
        return wrapped


@pytest.mark.parametrize("make, expected", [
    (lambda: _status_error(503), "HTTP 503"),
    (lambda: _status_error(500), "HTTP 500"),
    (_connection_error, "connection error (APIConnectionError)"),
    (lambda: ConnectionResetError(104, "Connection reset by peer"), "connection error (ConnectionResetError)"),
    (_disconnected, "connection error (RemoteProtocolError)"),
    (lambda: urllib.error.HTTPError(AT_GATEWAY, 503, "Service Unavailable", {}, None), "HTTP 503"),
    (lambda: urllib.error.URLError(ConnectionResetError(104, "reset")), "connection error (URLError)"),
    (lambda: urllib.error.URLError(BrokenPipeError(32, "Broken pipe")), "connection error (URLError)"),
    (lambda: _raised_from(_status_error(503)), "HTTP 503"),  # wrapped by the agent's framework
    (lambda: _raised_from(ConnectionResetError(104, "reset")), "connection error (ConnectionResetError)"),
])
def test_calls_the_gateway_refused_or_dropped_are_told_apart(make, expected):
    assert call_failure(make(), GATEWAY) == expected


@pytest.mark.parametrize("make", [
    lambda: _status_error(401), lambda: _status_error(410), lambda: _status_error(404),  # the agent's own mistakes
    lambda: urllib.error.HTTPError(AT_GATEWAY, 404, "Not Found", {}, None),
    lambda: _status_error(503, "https://api.example.com/v1/search"),  # another service the agent calls
    lambda: urllib.error.HTTPError("https://api.example.com/v1", 503, "Service Unavailable", {}, None),
    lambda: _connection_error(timeout=True),  # slow, not refused
    lambda: RuntimeError("the agent broke"), lambda: ValueError("bad answer"),
])
def test_other_failures_are_not_blamed_on_the_gateway(make):
    assert call_failure(make(), GATEWAY) is None


AGENTS = {
    "client": '''
async def run_episode(row, client):
    answer = await client.chat.completions.create(model="policy", messages=row["prompt"], max_tokens=4)
    return 1.0
''',
    "url": '''
import json, urllib.request

def run_episode(row, base_url, api_key):
    request = urllib.request.Request(base_url + "/chat/completions", method="POST",
                                     data=json.dumps({"messages": row["prompt"], "max_tokens": 4}).encode(),
                                     headers={"Authorization": "Bearer " + api_key})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()
    return 1.0
'''}


class _FullGateway(Gateway):
    """A gateway whose every slot is held by key holders (what a lock-out looks like to the agent)."""

    def __init__(self, limits=None):
        super().__init__(ServerLimits(max_connections=2, reserved_connections=1, idle_timeout_s=60.0))
        self.hogs = []
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=20)
            s.sendall(f"GET /e/x/v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.api_key}\r\n\r\n"
                      .encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            self.hogs.append(s)

    def close(self):
        for s in self.hogs:
            s.close()
        super().close()


@pytest.mark.parametrize("how", ["url", "client"])
def test_a_run_whose_agent_gets_503_on_every_call_says_the_gateway_refused_them(
        how, engine, tiny, agent_file, monkeypatch, tmp_path):
    """The issue's run at a small scale: every call refused (503, the connection closed at once). The
    episodes are failed, counted in rollout/agent/gateway_errors, and the run's stop names the
    gateway, not a reward function."""
    if how == "client":
        pytest.importorskip("openai")
    monkeypatch.setattr(agent_module, "Gateway", _FullGateway)
    _, tokenizer = tiny
    prompts = make_prompts(tokenizer, ["What is 12*34?", "add 1 and 2", "What is 5*6?"])
    agent = GatewayAgent(agent_file(AGENTS[how]), parser=load_parser("hermes"), concurrency=4, timeout_s=60.0,
                         wave_wait_s=10.0)
    limits = TurnLimits(max_turns=8, max_new_tokens=8, max_observation_tokens=64, observation_truncation="right",
                        episode_tokens=200)
    try:
        gen = agent.rollout(engine, tokenizer, prompts, 1, limits, temperature=1.0, top_p=1.0, top_k=0)
    finally:
        agent.shutdown()
    failures = [e.call_failure for e in gen.episodes]  # the 503, or a reset when the client was still sending
    assert all(f == "HTTP 503" or f.startswith("connection error (") for f in failures), failures
    assert episode_metrics(gen.episodes)["rollout/agent/gateway_errors"] == 3.0
    result = score_episodes(Scorer([], allow_empty=True), prompts, gen, environment=False)
    assert not bool(result.valid.any())

    monkeypatch.setattr(report, "save", lambda run, step: tmp_path / f"step_{step:06d}")
    run = SimpleNamespace(state=SimpleNamespace(consecutive_empty=0, consecutive_skips=0, empty_cause=None),
                          config=SimpleNamespace(trainer=SimpleNamespace(max_consecutive_skips=2)))
    extras = {"result": result, "episodes": gen.episodes}
    report.count_empty(run, extras)
    report.halt_if_stuck(run, 1)  # one empty step: not yet
    report.count_empty(run, extras)
    with pytest.raises(TrainingHalted) as halted:
        report.halt_if_stuck(run, 2)
    message = str(halted.value)
    assert "the gateway refused or failed the agent's calls" in message
    assert "3 of 3 episodes" in message and ("HTTP 503 x" in message or "connection error (" in message)
    assert "Fix the reward function" not in message and "every sample failed a reward function" not in message


def test_an_empty_step_without_gateway_failures_still_blames_the_reward_functions(monkeypatch, tmp_path):
    monkeypatch.setattr(report, "save", lambda run, step: tmp_path / f"step_{step:06d}")
    run = SimpleNamespace(state=SimpleNamespace(consecutive_empty=0, consecutive_skips=0, empty_cause=None),
                          config=SimpleNamespace(trainer=SimpleNamespace(max_consecutive_skips=1)))
    episodes = [SimpleNamespace(call_failure=None), SimpleNamespace(call_failure=None)]
    report.count_empty(run, {"result": SimpleNamespace(valid=torch.zeros(2, dtype=torch.bool)), "episodes": episodes})
    with pytest.raises(TrainingHalted, match="every sample failed a reward function"):
        report.halt_if_stuck(run, 1)


def test_the_step_warning_says_the_agents_calls_failed_at_the_gateway(capsys):
    run = SimpleNamespace(state=SimpleNamespace(skipped_steps=0, warnings=0))
    result = SimpleNamespace(errors={"agent": "the agent raised InternalServerError: Error code: 503"})
    episodes = [SimpleNamespace(call_failure="HTTP 503"), SimpleNamespace(call_failure=None)]
    report.report_step(run, 1, {}, {"result": result, "episodes": episodes}, set(), 0)
    out = capsys.readouterr().out
    assert "the agent (rollout.multi_turn.agent) failed on some episodes: 1 of 2 episodes ended because the agent's calls to " \
           "the gateway were refused or failed (HTTP 503 x1) (shown once)" in out


def test_a_reward_function_that_fails_everywhere_is_still_blamed_when_one_call_also_got_503(monkeypatch, tmp_path):
    """Review of round 4, item 4: 34 of 35 episodes reached the reward function and it failed on every
    one; one agent call also got a 503. The stop blamed the gateway alone ("so those episodes never
    reached the reward functions") and never said the reward function failed. The gateway is the
    cause only when every episode of the step ended at it."""
    monkeypatch.setattr(report, "save", lambda run, step: tmp_path / f"step_{step:06d}")
    run = SimpleNamespace(state=SimpleNamespace(consecutive_empty=0, consecutive_skips=0, empty_cause=None),
                          config=SimpleNamespace(trainer=SimpleNamespace(max_consecutive_skips=1)))
    episodes = [SimpleNamespace(call_failure="HTTP 503")] + [SimpleNamespace(call_failure=None) for _ in range(34)]
    report.count_empty(run, {"result": SimpleNamespace(valid=torch.zeros(35, dtype=torch.bool)), "episodes": episodes})
    with pytest.raises(TrainingHalted) as halted:
        report.halt_if_stuck(run, 1)
    message = str(halted.value)
    assert "every sample failed a reward function" in message and "Fix the reward function" in message
    assert "never reached the reward functions" not in message


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: a connect is refused at once (loopback)
    return port


def _raised_by(call):
    try:
        call()
    except Exception as err:  # noqa: BLE001
        return err
    raise AssertionError("the call did not raise")


def _openai_to_another_service_that_is_down():
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{_closed_port()}/v1", api_key="x", max_retries=0, timeout=20)
    messages = [{"role": "user", "content": "x"}]
    return _raised_by(lambda: client.chat.completions.create(model="judge", messages=messages))


def _urllib_to(url: str):
    import urllib.request

    return _raised_by(lambda: urllib.request.urlopen(url, timeout=20))


@pytest.mark.parametrize("make", [
    # another model server the agent calls (a judge), down: openai's error names its URL, but the
    # httpx error it was raised from does not, and the walk through the causes blamed the gateway
    _openai_to_another_service_that_is_down,
    lambda: _raised_from(_openai_to_another_service_that_is_down()),
    # a tool server, down: urllib's URLError names no URL; the gateway never refuses a connect while
    # its rollout runs (it listens on 127.0.0.1 all along and answers 503 when full)
    lambda: _urllib_to(f"http://127.0.0.1:{_closed_port()}/tool"),
    lambda: ConnectionRefusedError(111, "Connection refused"),
    # a web API by name, offline: the gateway is called by address, never by a name to resolve
    lambda: urllib.error.URLError(socket.gaierror(-2, "Name or service not known")),
])
def test_another_service_the_agent_calls_failing_to_connect_is_not_blamed_on_the_gateway(make):
    """Review of round 4, item 4: a judge model or a tool server that is down, or a name that does
    not resolve, was reported as "the gateway refused or failed the agent's calls" (the stop then
    sends the user to the gateway's limits)."""
    assert call_failure(make(), GATEWAY) is None
