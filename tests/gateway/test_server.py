"""The gateway's HTTP side: loopback only, a random port and key per run, requests without the key
refused, streaming and bad parameters refused with errors that name the parameter."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from steadyrl.gateway.protocol import RequestError, parse_request
from steadyrl.gateway.server import Gateway


def post(url: str, body, key: str | None):
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture()
def gateway():
    g = Gateway()
    seen = []

    def submit(token, request):
        seen.append((token, request))
        return 200, {"ok": True}

    g.submit = submit
    g.seen = seen
    yield g
    g.close()


CHAT = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}


def test_gateway_listens_on_loopback_only_on_a_random_port_with_a_random_key(gateway):
    other = Gateway()
    try:
        assert gateway._server.server_address[0] == "127.0.0.1"
        assert gateway.base_url("tok").startswith(f"http://127.0.0.1:{gateway.port}/e/tok/v1")
        assert gateway.port != other.port and gateway.api_key != other.api_key and len(gateway.api_key) >= 32
    finally:
        other.close()


@pytest.mark.parametrize("key", [None, "wrong-key", ""])
def test_requests_without_the_runs_key_are_refused_with_401(gateway, key):
    status, body = post(gateway.base_url("tok") + "/chat/completions", CHAT, key)
    assert status == 401 and body["error"]["type"] == "authentication_error"
    assert gateway.seen == []  # never reached the rollout


def test_a_request_with_the_key_reaches_the_rollout_with_its_episode_token(gateway):
    status, body = post(gateway.base_url("ep1") + "/chat/completions", CHAT, gateway.api_key)
    assert (status, body) == (200, {"ok": True})
    token, request = gateway.seen[0]
    assert token == "ep1" and request.chat and request.messages == [{"role": "user", "content": "hi"}]


def test_streaming_is_refused_with_a_clear_error(gateway):
    status, body = post(gateway.base_url("e") + "/chat/completions", {**CHAT, "stream": True}, gateway.api_key)
    assert status == 400 and body["error"]["param"] == "stream" and "does not stream" in body["error"]["message"]


def test_unknown_routes_are_404_and_a_closed_gateway_refuses_with_410(gateway):
    assert post(gateway.base_url("e") + "/embeddings", {}, gateway.api_key)[0] == 404
    gateway.submit = Gateway._closed
    status, body = post(gateway.base_url("e") + "/completions", {"prompt": "x"}, gateway.api_key)
    assert status == 410 and "no rollout is running" in body["error"]["message"]


def test_gateway_stops_listening_when_closed():
    g = Gateway()
    url = g.base_url("e") + "/completions"
    g.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=5)


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"content": "no role"}]}, "messages"),
    ({**CHAT, "n": 0}, "n"),
    ({**CHAT, "temperature": "hot"}, "temperature"),
    ({**CHAT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({**CHAT, "tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages"),
])
def test_bad_chat_requests_are_refused_naming_the_parameter(body, param):
    with pytest.raises(RequestError) as err:
        parse_request(body, chat=True)
    assert err.value.status == 400 and err.value.param == param


def test_completion_prompts_are_text_or_token_ids_and_chat_arguments_become_objects():
    assert parse_request({"prompt": "abc"}, chat=False).prompt == "abc"
    assert parse_request({"prompt": [1, 2, 3], "logprobs": 0}, chat=False).prompt_ids == [1, 2, 3]
    with pytest.raises(RequestError):
        parse_request({"prompt": [1, -2]}, chat=False)
    req = parse_request({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}],
        "max_completion_tokens": 7}, chat=True)
    assert req.messages[0]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert req.messages[0]["content"] == "" and req.max_tokens == 7
