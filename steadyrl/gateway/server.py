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

Any local user can connect, so a connection costs little and not for long (:class:`ServerLimits`):
at most ``max_connections`` are open at once, ``reserved_connections`` of them only for connections
that showed the key; a connection that has not shown it lives ``unauthenticated_lifetime_s`` in all,
and a newcomer pushes the oldest such one out rather than being turned away (:mod:`.slots`: a pile
of keyless sockets cannot lock the agent out); when every slot is held by authenticated
connections one more is answered 503 and closed, without a thread. A connection waiting for a
request is closed after ``idle_timeout_s``; once a request line is in, all its headers must arrive
within ``header_timeout_s`` and its body within ``body_timeout_s`` (deadlines, not per-read
timeouts: a client sending a byte at a time is cut); the key is checked the moment the
``Authorization`` header arrives; headers are capped at ``max_header_bytes`` (431) and bodies at
``max_body_bytes`` (413). Every refused request (any 4xx or 5xx answer) is answered with
``Connection: close`` and its connection closed: a refusal never leaves a socket behind.
"""

from __future__ import annotations

import hmac
import io
import json
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .protocol import RequestError, error_body, parse_request
from .slots import Slots, push_out

HOST = "127.0.0.1"
MAX_BODY_BYTES = 16 * 2**20
"""Largest request body read; a longer one is refused with 413."""
MODEL_NAME = "steadyrl-policy"
"""The model name the gateway reports (a request's ``model`` is ignored: it serves the policy)."""


@dataclass(frozen=True)
class ServerLimits:
    """What one connection may cost the trainer (module docstring): counts, seconds and bytes.
    ``reserved_connections`` None: half of ``max_connections``."""

    max_connections: int = 512
    reserved_connections: int | None = None
    unauthenticated_lifetime_s: float = 5.0
    idle_timeout_s: float = 15.0
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    write_timeout_s: float = 60.0
    max_header_bytes: int = 64 * 2**10
    max_body_bytes: int = MAX_BODY_BYTES

    def __post_init__(self):
        if self.reserved_connections is None:
            object.__setattr__(self, "reserved_connections", self.max_connections // 2)
        if not 0 <= self.reserved_connections < self.max_connections:
            raise ValueError(f"ServerLimits.reserved_connections = {self.reserved_connections!r}: must be >= 0 and "
                             f"below max_connections = {self.max_connections!r}")
        if not self.unauthenticated_lifetime_s > 0:
            raise ValueError(f"ServerLimits.unauthenticated_lifetime_s = {self.unauthenticated_lifetime_s!r}: "
                             "must be a number of seconds > 0")

    @classmethod
    def for_concurrency(cls, concurrency: int) -> "ServerLimits":
        """Room for every running episode's connections (two each, and some), never more than half
        the process's file descriptors."""
        try:
            import resource

            fds = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (ImportError, ValueError, OSError):
            fds = 1024
        fds = 1024 if fds in (-1, None) or fds <= 0 else fds
        return cls(max_connections=max(16, min(2 * concurrency + 32, fds // 2)))


class _Refused(Exception):
    """A request refused while it is read (wrong key, headers too large): answered, then closed."""

    def __init__(self, error: RequestError):
        super().__init__(str(error))
        self.error = error


class _DeadlineRaw(io.RawIOBase):
    """The connection's bytes, each read under what is left of ``deadline`` and of ``cutoff`` (the
    end of a connection's life until it shows the key; None: no limit)."""

    def __init__(self, sock):
        super().__init__()
        self.sock, self.raw, self.deadline, self.cutoff = sock, sock.makefile("rb", buffering=0), None, None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int | None:
        deadline = self.deadline if self.cutoff is None else min(self.cutoff, self.deadline or self.cutoff)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the client did not send its request in time")
            self.sock.settimeout(left)
        return self.raw.readinto(b)

    def close(self) -> None:
        self.raw.close()
        super().close()


class _Reader:
    """The handler's ``rfile``: lines and bodies under deadlines; while headers are read (``header_bytes``
    not None) it counts their bytes and checks the key the moment its header arrives."""

    def __init__(self, handler: "_Handler"):
        self.handler, self.raw = handler, _DeadlineRaw(handler.connection)
        self.buffer = io.BufferedReader(self.raw)
        self.header_bytes: int | None = None

    def expect(self, seconds: float | None, headers: bool = False) -> None:
        """What is read next must arrive within ``seconds`` (None: no limit); ``headers``: count them."""
        self.raw.deadline = None if seconds is None else time.monotonic() + seconds
        self.header_bytes = 0 if headers else None

    def readline(self, limit: int = -1) -> bytes:
        line = self.buffer.readline(limit)
        if self.header_bytes is not None:
            self.header_bytes += len(line)
            limits = self.handler.server.limits
            if self.header_bytes > limits.max_header_bytes:
                raise _Refused(RequestError(f"request headers over {limits.max_header_bytes} bytes", status=431))
            if line[:14].lower() == b"authorization:":
                self.handler.check_key(line[14:].decode("latin-1").strip())
        return line

    def read(self, n: int = -1) -> bytes:
        return self.buffer.read(n)

    def close(self) -> None:
        self.buffer.close()


class _Handler(BaseHTTPRequestHandler):
    server_version = "steadyrl-gateway"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # kept-alive connections: a small answer must not wait for the client's ACK

    def log_message(self, format, *args):  # noqa: A002 - quiet: a run's log is its metrics
        pass

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain reader: replaced by one with deadlines and header checks
        self.rfile = _Reader(self)
        # not shown the key yet: a short life in all, from its accept (None: pushed out already; it ends)
        admitted = self.server.slots.admitted_at(self.connection)
        start = time.monotonic() if admitted is None else admitted
        self.rfile.raw.cutoff = start + self.server.limits.unauthenticated_lifetime_s

    def handle_one_request(self) -> None:
        limits: ServerLimits = self.server.limits
        self.rfile.expect(limits.idle_timeout_s, headers=True)  # the next request line, and its headers' bytes
        try:
            super().handle_one_request()
        except _Refused as refused:
            self.close_connection = True
            if not getattr(self, "request_version", None):
                self.request_version, self.requestline, self.command = "HTTP/1.1", "", ""
            self._fail(refused.error)
        finally:
            self.rfile.expect(None)

    def parse_request(self) -> bool:
        self.rfile.raw.deadline = time.monotonic() + self.server.limits.header_timeout_s
        ok = super().parse_request()
        self.rfile.header_bytes = None
        return ok

    def check_key(self, given: str) -> None:
        """Refuse (401) unless ``given`` is ``Bearer <the run's key>`` (constant-time comparison)."""
        key = given[len("Bearer "):] if given.startswith("Bearer ") else ""
        if not hmac.compare_digest(key.encode("latin-1", "replace"), self.server.gateway.api_key.encode()):
            raise _Refused(RequestError("missing or wrong API key (Authorization: Bearer <the run's key>)",
                                        status=401, kind="authentication_error"))
        if self.rfile.raw.cutoff is not None:
            if not self.server.slots.authenticate(self.connection):  # pushed out while it was reading
                raise ConnectionAbortedError("the connection was pushed out before it showed the key")
            self.rfile.raw.cutoff = None

    def _write_timeout(self) -> float:
        """A connection that has not shown the key gets no more time to be answered than it has left."""
        cutoff, limit = self.rfile.raw.cutoff, self.server.limits.write_timeout_s
        return limit if cutoff is None else min(limit, max(cutoff - time.monotonic(), 0.1))

    def _send(self, status: int, body: dict) -> None:
        """The answer, headers and body in one write; any refusal (status >= 400) closes the connection."""
        self.connection.settimeout(self._write_timeout())
        data = json.dumps(body).encode()
        self.send_response(status)
        if status >= 400:
            self.send_header("Connection", "close")  # sets close_connection: no socket is kept after a refusal
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._headers_buffer.append(b"\r\n" + data)  # headers and body in one write
        self.flush_headers()

    def _fail(self, err: RequestError) -> None:
        self._send(err.status, error_body(err))

    def _route(self) -> tuple[str, str] | None:
        """``(episode token, route)`` of the path, after the key was checked."""
        try:
            self.check_key(self.headers.get("Authorization", ""))  # no such header (one that came was checked)
        except _Refused as refused:
            self._fail(refused.error)
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
        limits: ServerLimits = self.server.limits
        given = self.headers.get("Content-Length") or "0"
        length = int(given) if given.strip().isdigit() else -1
        if length < 0 or length > limits.max_body_bytes:
            self.close_connection = True
            what = f"{length} bytes" if length >= 0 else f"length {given[:40]!r}"
            return self._fail(RequestError(f"request body of {what}; Content-Length is a number of bytes, at most "
                                           f"{limits.max_body_bytes}", status=413 if length >= 0 else 400))
        self.rfile.expect(limits.body_timeout_s)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError, a number too long
            return self._fail(RequestError(f"the request body is not JSON: {err}"))
        finally:
            self.rfile.expect(None)
        try:
            request = parse_request(body, chat=route == "chat/completions")
            status, answer = self.server.gateway.submit(token, request)
        except RequestError as err:
            return self._fail(err)
        self._send(status, answer)


_BUSY_BODY = json.dumps({"error": {"message": "too many open connections to the gateway; try again",
                                    "type": "server_error", "param": None, "code": None}}).encode()
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
         b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 1024  # connections waiting to be accepted: every running episode may connect at once

    def __init__(self, address, handler, limits: ServerLimits):
        self.limits = limits
        self.slots = Slots(limits.max_connections, limits.reserved_connections)
        super().__init__(address, handler)

    @property
    def open_connections(self) -> int:
        """Handler threads alive (a pushed-out connection's until it ends)."""
        return self.slots.threads

    @property
    def refused_connections(self) -> int:
        """Connections answered 503 at once (every slot held by authenticated connections)."""
        return self.slots.refused

    def process_request(self, request, client_address) -> None:
        """A thread for the connection (pushing out the oldest connection that has not shown the
        key when there is no room, :mod:`.slots`), or a 503 and close, at once."""
        admitted, pushed_out = self.slots.admit(request)
        if pushed_out is not None:
            push_out(pushed_out)
        if not admitted:
            try:
                request.setblocking(False)
                request.send(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release(request)

    def handle_error(self, request, client_address) -> None:
        """A connection the client dropped, or that was pushed out, ends quietly; anything else is printed."""
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class Gateway:
    """The loopback server of one run. ``submit(token, request) -> (status, body)`` answers a
    checked request of episode ``token`` (set by the rollout, :class:`~.waves.Waves`)."""

    def __init__(self, limits: ServerLimits | None = None):
        self.api_key = secrets.token_urlsafe(32)
        self.submit = self._closed
        self.limits = limits or ServerLimits()
        self._server = _Server((HOST, 0), _Handler, self.limits)
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
