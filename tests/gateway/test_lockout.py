"""Trust, round 4, item 4: a local user without the key cannot lock the agent out of the gateway.

A keyless request was answered 401 and its connection kept (its idle clock restarted): a pile of
such keep-alive sockets held every slot and the agent got 503 on every call. Now a refused request
closes its connection, a connection that has not shown the key lives a short while in all, and
keyless connections get only part of the slots (a newcomer pushes the oldest keyless one out).
Loopback only; every loop is bounded and every read has a timeout, so a broken limit fails a test
instead of hanging it."""

from __future__ import annotations

import json
import select
import socket
import time

import pytest

from steadyrl.gateway.server import Gateway, ServerLimits

CHAT = json.dumps({"model": "x", "messages": [{"role": "user", "content": "hi"}]}).encode()
WAIT_S = 20.0  # the longest a read blocks when a limit does not hold (a failure, not a timing)


def gateway(**limits) -> Gateway:
    g = Gateway(ServerLimits(**limits))
    g.submit = lambda token, request: (200, {"ok": True})
    return g


def connect(g: Gateway) -> socket.socket:
    return socket.create_connection(("127.0.0.1", g.port), timeout=WAIT_S)


def keyed(g: Gateway, path: str = "/e/tok/v1/chat/completions") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {g.api_key}\r\n"
            f"Content-Length: {len(CHAT)}\r\n\r\n").encode() + CHAT


KEYLESS = b"GET /e/tok/v1/models HTTP/1.1\r\nHost: x\r\n\r\n"


def answer(s: socket.socket) -> tuple[bytes, bytes]:
    """One response read off a kept-alive connection: ``(status line and headers, body)``; ``(b"", b"")``
    if the server closed the connection before answering."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return data, b""
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(65536)
    return head, body


def closed_by_server(s: socket.socket) -> bool:
    """True when the server closed ``s`` (EOF or reset) within WAIT_S; False if it kept it open."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_pile_of_keyless_keep_alive_sockets_does_not_lock_the_key_holder_out():
    """The issue's lock-out at a cap of 8: 12 sockets that were refused (401) and kept alive, and 12
    that never send a byte; the key holder is still answered, on new connections and on a kept one."""
    g = gateway(max_connections=8, idle_timeout_s=WAIT_S * 3, unauthenticated_lifetime_s=WAIT_S * 3,
                header_timeout_s=WAIT_S * 3)
    try:
        refused = []
        for _ in range(12):
            s = connect(g)
            s.sendall(KEYLESS)
            head, _ = answer(s)
            assert head.startswith(b"HTTP/1.1 401"), head[:40]
            refused.append(s)
        silent = [connect(g) for _ in range(12)]
        for _ in range(3):  # the key holder, on a fresh connection each time
            s = connect(g)
            s.sendall(keyed(g))
            head, body = answer(s)
            assert head.startswith(b"HTTP/1.1 200"), head[:60]
            assert json.loads(body) == {"ok": True}
            s.close()
        kept = connect(g)
        for _ in range(2):  # and on one kept-alive connection
            kept.sendall(keyed(g))
            assert answer(kept)[0].startswith(b"HTTP/1.1 200")
        waiting, authenticated = g._server.slots.counts()
        assert waiting <= 8 - g.limits.reserved_connections and authenticated >= 1
        assert g._server.slots.evicted >= 12 - (8 - g.limits.reserved_connections)  # the silent pile pushed out
        assert all(closed_by_server(s) for s in refused)  # each was closed after its 401
        for s in [*refused, *silent, kept]:
            s.close()
    finally:
        g.close()


@pytest.mark.parametrize("request_bytes, status", [
    (KEYLESS, b"401"),
    (b"GET /e/tok/v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n", b"401"),
    (b"GET /nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer KEY\r\n\r\n", b"404"),  # a key holder's mistake too
])
def test_a_refused_request_closes_its_connection(request_bytes, status):
    """Every limit that could close the connection instead is far away: only the refusal does."""
    g = gateway(idle_timeout_s=WAIT_S * 3, unauthenticated_lifetime_s=WAIT_S * 3, header_timeout_s=WAIT_S * 3)
    try:
        s = connect(g)
        s.sendall(request_bytes.replace(b"KEY", g.api_key.encode()))
        head, _ = answer(s)
        assert head.split(b" ")[1] == status
        assert b"connection: close" in head.lower()
        assert closed_by_server(s)
        s.close()
    finally:
        g.close()


def test_a_slow_keyless_connection_is_dropped_after_its_short_lifetime():
    """Headers a byte every 20 ms, each header well within every per-read and header deadline: the
    connection still ends once ``unauthenticated_lifetime_s`` is over; so does one that sends nothing."""
    g = gateway(unauthenticated_lifetime_s=0.3, idle_timeout_s=WAIT_S * 3, header_timeout_s=WAIT_S * 3)
    try:
        silent = connect(g)
        s = connect(g)
        s.sendall(b"GET /e/tok/v1/models HTTP/1.1\r\n")
        sent = 0
        for _ in range(int(WAIT_S / 0.02)):  # bounded: a broken limit ends the loop, not the test run
            if select.select([s], [], [], 0.02)[0]:
                break
            try:
                s.sendall(b"X-Slow: " if sent == 0 else (b"a\r\nX-Slow: " if sent % 10 == 0 else b"a"))
            except OSError:
                break
            sent += 1
        assert sent < WAIT_S / 0.02  # cut before the loop ran out
        assert closed_by_server(s)
        assert closed_by_server(silent)
        for c in (s, silent):
            c.close()
    finally:
        g.close()


def test_a_connection_that_showed_the_key_outlives_the_keyless_lifetime():
    g = gateway(unauthenticated_lifetime_s=0.2, idle_timeout_s=WAIT_S * 3)
    try:
        s = connect(g)
        s.sendall(keyed(g))
        assert answer(s)[0].startswith(b"HTTP/1.1 200")
        time.sleep(0.5)  # past the keyless lifetime: a connection that showed the key keeps its slot
        s.sendall(keyed(g))
        assert answer(s)[0].startswith(b"HTTP/1.1 200")
        s.close()
    finally:
        g.close()


def test_only_when_every_slot_is_a_key_holders_is_a_newcomer_answered_503():
    g = gateway(max_connections=4, idle_timeout_s=WAIT_S * 3)
    try:
        held = []
        for _ in range(4):
            s = connect(g)
            s.sendall(keyed(g))
            assert answer(s)[0].startswith(b"HTTP/1.1 200")
            held.append(s)
        late = connect(g)
        head, body = answer(late)
        assert head.startswith(b"HTTP/1.1 503") and b"too many open connections" in body
        assert g._server.refused_connections == 1
        for s in [*held, late]:
            s.close()
    finally:
        g.close()


@pytest.mark.parametrize("limits, field", [
    ({"max_connections": 4, "reserved_connections": 4}, "reserved_connections = 4"),
    ({"max_connections": 4, "reserved_connections": -1}, "reserved_connections = -1"),
    ({"unauthenticated_lifetime_s": 0}, "unauthenticated_lifetime_s = 0"),
])
def test_limits_out_of_range_are_refused_naming_the_field(limits, field):
    with pytest.raises(ValueError, match=field):
        ServerLimits(**limits)
