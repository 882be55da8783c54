"""The gateway cannot be exhausted by a local user without its key: connections are capped (keyless
ones to a share, the oldest pushed out; tests/gateway/test_lockout.py), idle ones are closed, a client sending a byte at a time is cut
by the headers' deadline, the key is checked the moment its header arrives, and header and body
sizes are capped. Limits are small here, so nothing waits long; the tests count, never time."""

from __future__ import annotations

import json
import select
import socket
import urllib.request

import pytest

from steadyrl.gateway.server import Gateway, ServerLimits

CHAT = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
WAIT_S = 20.0  # the longest any read here blocks when a limit does not hold (a failure, not a timing)


@pytest.fixture()
def small():
    g = Gateway(ServerLimits(max_connections=4, idle_timeout_s=0.3, header_timeout_s=0.3, body_timeout_s=0.3,
                             max_header_bytes=2048, max_body_bytes=4096))
    g.submit = lambda token, request: (200, {"ok": True})
    yield g
    g.close()


def connect(g: Gateway) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", g.port), timeout=WAIT_S)
    return s


def read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    try:
        while chunk := s.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def authorised(g: Gateway) -> int:
    request = urllib.request.Request(g.base_url("tok") + "/chat/completions", data=json.dumps(CHAT).encode(),
                                     headers={"Authorization": f"Bearer {g.api_key}"}, method="POST")
    with urllib.request.urlopen(request, timeout=WAIT_S) as response:
        return response.status


def test_keyless_connections_past_their_share_push_out_the_oldest_idle_ones_are_closed_and_the_key_holder_is_answered():
    """Cap 4, 2 of them for key holders: of 10 connections that send nothing, each past the second
    pushes the oldest out; the last two are closed when their keyless lifetime is over. (A 503 is
    only for a newcomer when every slot is a key holder's: tests/gateway/test_lockout.py.)"""
    small = Gateway(ServerLimits(max_connections=4, idle_timeout_s=1.5, unauthenticated_lifetime_s=1.5))
    small.submit = lambda token, request: (200, {"ok": True})
    idle = [connect(small) for _ in range(10)]
    answers = [read_all(s) for s in idle]  # each ends: pushed out, or closed when idle too long
    assert answers == [b""] * 10
    assert small._server.slots.evicted == 8 and small._server.refused_connections == 0
    assert authorised(small) == 200  # the server still answers once the idle ones are gone
    assert small._server.open_connections <= 1
    for s in idle:
        s.close()
    small.close()


def test_a_client_sending_its_headers_a_byte_at_a_time_is_cut_by_the_headers_deadline(small):
    s = connect(small)
    s.sendall(b"POST /e/tok/v1/chat/completions HTTP/1.1\r\n")
    sent = 0
    for _ in range(int(WAIT_S / 0.02)):  # a byte every 20 ms: each read is well within any per-read timeout
        if select.select([s], [], [], 0.02)[0]:
            break
        try:
            s.sendall(b"X-Slow: " if sent == 0 else b"a")
        except OSError:
            break
        sent += 1
    assert read_all(s) == b""  # closed, no answer: the headers never came
    assert sent < WAIT_S / 0.02  # cut before the loop ran out
    s.close()
    assert authorised(small) == 200


def test_the_key_is_checked_as_soon_as_its_header_arrives(small):
    g = Gateway(ServerLimits(header_timeout_s=WAIT_S * 3, idle_timeout_s=WAIT_S * 3))
    try:
        s = socket.create_connection(("127.0.0.1", g.port), timeout=WAIT_S)
        s.sendall(b"POST /e/tok/v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer wrong\r\n")  # headers go on
        answer = read_all(s)  # answered and closed without the rest of the headers
        assert answer.startswith(b"HTTP/1.1 401") and b"authentication_error" in answer
        s.close()
    finally:
        g.close()


@pytest.mark.parametrize("request_bytes, status", [
    (b"GET /e/tok/v1/models HTTP/1.1\r\n" + b"X-Big: " + b"a" * 4000 + b"\r\n\r\n", b"431"),
    (b"POST /e/tok/v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer KEY\r\nContent-Length: 5000\r\n\r\n",
     b"413"),
    (b"POST /e/tok/v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer KEY\r\nContent-Length: -5\r\n\r\n",
     b"400"),
])
def test_header_and_body_sizes_are_capped(small, request_bytes, status):
    s = connect(small)
    s.sendall(request_bytes.replace(b"KEY", small.api_key.encode()))
    answer = read_all(s)
    assert answer.split(b" ")[1] == status
    s.close()


def test_a_body_slower_than_its_deadline_is_cut(small):
    s = connect(small)
    s.sendall(b"POST /e/tok/v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer " + small.api_key.encode()
              + b"\r\nContent-Length: 100\r\n\r\n{")
    assert read_all(s) == b""  # the rest of the body never came: closed, not waited for
    s.close()
    assert small._server.open_connections <= 1


def test_the_default_cap_leaves_room_for_every_episode_and_half_the_file_descriptors():
    limits = ServerLimits.for_concurrency(256)
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert limits.max_connections <= max(16, soft // 2)
    assert limits.max_connections >= min(2 * 256, soft // 2)
    assert ServerLimits.for_concurrency(1).max_connections >= 16
