"""The gateway's HTTP side: a loopback server, its key, and the routes an OpenAI client calls.

* It listens on ``127.0.0.1`` only, on a port the system picks, and lives as long as the run's
  agent (:meth:`Gateway.close` at the end of the run, whatever happened).
* Every request must carry the run's key (``Authorization: Bearer <key>``, a fresh random key per
  run, compared in constant time); any other is refused with 401 before its body is read.
* Each episode has its own base URL, ``http://127.0.0.1:<port>/e/<episode token>/v1``: the token
  (random too) tells the gateway which episode a call belongs to. A call for an episode that is
  over (it returned, raised or ran out of time) is refused with 410.

Routes under a base URL: ``POST /chat/completions``, ``POST /completions``, ``GET /models``. The
handler threads only read and check requests (:func:`~.protocol.parse_request`); rendering,
tokenising and generating happen in the rollout's own thread (:mod:`.waves`), which answers them.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .protocol import RequestError, error_body, parse_request

HOST = "127.0.0.1"
MAX_BODY_BYTES = 16 * 2**20
"""Largest request body read; a longer one is refused with 413."""
MODEL_NAME = "steadyrl-policy"
"""The model name the gateway reports (a request's ``model`` is ignored: it serves the policy)."""


class _Handler(BaseHTTPRequestHandler):
    server_version = "steadyrl-gateway"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # kept-alive connections: a small answer must not wait for the client's ACK

    def log_message(self, format, *args):  # noqa: A002 - quiet: a run's log is its metrics
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._headers_buffer.append(b"\r\n" + data)  # headers and body in one write
        self.flush_headers()

    def _fail(self, err: RequestError) -> None:
        self._send(err.status, error_body(err))

    def _route(self) -> tuple[str, str] | None:
        """``(episode token, route)`` of the path, after the key was checked."""
        gateway: Gateway = self.server.gateway
        given = self.headers.get("Authorization", "")
        key = given[len("Bearer "):] if given.startswith("Bearer ") else ""
        if not hmac.compare_digest(key.encode(), gateway.api_key.encode()):
            self._fail(RequestError("missing or wrong API key (Authorization: Bearer <the run's key>)", status=401,
                                    kind="authentication_error"))
            return None
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if len(parts) < 3 or parts[0] != "e" or parts[2] != "v1":
            self._fail(RequestError(f"no route {self.path!r}; the base URL is http://{HOST}:<port>/e/<episode>/v1",
                                    status=404, kind="not_found_error"))
            return None
        return parts[1], "/".join(parts[3:])

    def do_GET(self):  # noqa: N802 - the http.server name
        routed = self._route()
        if routed is None:
            return
        if routed[1] != "models":
            return self._fail(RequestError(f"no GET route {routed[1]!r}", status=404, kind="not_found_error"))
        self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "steadyrl"}]})

    def do_POST(self):  # noqa: N802
        routed = self._route()
        if routed is None:
            return
        token, route = routed
        if route not in ("chat/completions", "completions"):
            return self._fail(RequestError(f"no POST route {route!r}; the gateway serves chat/completions and "
                                           "completions", status=404, kind="not_found_error"))
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            return self._fail(RequestError(f"request body of {length} bytes; at most {MAX_BODY_BYTES}", status=413))
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            return self._fail(RequestError(f"the request body is not JSON: {err}"))
        try:
            request = parse_request(body, chat=route == "chat/completions")
            status, answer = self.server.gateway.submit(token, request)
        except RequestError as err:
            return self._fail(err)
        self._send(status, answer)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 1024  # connections waiting to be accepted: every running episode may connect at once


class Gateway:
    """The loopback server of one run. ``submit(token, request) -> (status, body)`` answers a
    checked request of episode ``token`` (set by the rollout, :class:`~.waves.Waves`)."""

    def __init__(self):
        self.api_key = secrets.token_urlsafe(32)
        self.submit = self._closed
        self._server = _Server((HOST, 0), _Handler)
        self._server.gateway = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="steadyrl-gateway", daemon=True)
        self._thread.start()

    @staticmethod
    def _closed(token: str, request) -> tuple[int, dict]:
        raise RequestError("no rollout is running: episode calls are answered only while their rollout runs",
                           status=410)

    def base_url(self, token: str) -> str:
        return f"http://{HOST}:{self.port}/e/{token}/v1"

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(16)

    def close(self) -> None:
        """Stop listening (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None
