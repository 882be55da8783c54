"""A scripted HTTP server on 127.0.0.1 for the tests of the HTTP reward backends (nothing leaves the
machine).

``ScriptedServer(respond)`` serves on a free port in a daemon thread; ``respond(n, path, body)``
gets the request's number (0, 1, ...), path and decoded JSON body and returns
``(status, payload)`` (a dict/list sent as JSON, bytes sent as they are) or ``HANG`` (the handler
waits until the server closes, or ``max_hang_s``). Every request is recorded in ``requests``; past
``max_requests`` the server answers 500 and the test sees the count go over its bound.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HANG = object()


class ScriptedServer:
    def __init__(self, respond, *, max_requests: int = 100, max_hang_s: float = 10.0):
        self.respond, self.max_requests, self.max_hang_s = respond, max_requests, max_hang_s
        self.requests: list[tuple[str, object, dict]] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
                with server._lock:
                    n = len(server.requests)
                    server.requests.append((self.path, body, dict(self.headers)))
                reply = (500, {"error": "over the test's request bound"}) if n >= server.max_requests \
                    else server.respond(n, self.path, body)
                if reply is HANG:
                    server.closing.wait(server.max_hang_s)
                    return
                status, payload = reply[0], reply[1]
                headers = reply[2] if len(reply) > 2 else {}
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port() -> int:
    """A port with nothing listening on it (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat_reply(text: str) -> dict:
    """An OpenAI chat-completions reply whose message is ``text``."""
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
