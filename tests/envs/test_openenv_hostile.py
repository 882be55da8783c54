"""A hostile ``openenv:`` server's ``/schema`` is exit 2 naming it, never a traceback or a hang
(issue 30, item 10): arrays nested thousands deep, a JSON list, fields of the wrong type, a body
that never ends (read with a size cap). A stand-in ``http.server`` on 127.0.0.1 serves each."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("openenv.core", reason="pip install 'steadyrl[openenv]'")

from steadyrl.envs.openenv import SCHEMA_MAX_BYTES, check_server  # noqa: E402
from steadyrl.errors import ConfigError  # noqa: E402

ENDLESS = object()


def _serve(body):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            if body is ENDLESS:  # no length, never done: the client must stop reading by itself
                chunk = b"[" * 65536
                try:
                    for _ in range(4 * SCHEMA_MAX_BYTES // len(chunk)):
                        self.wfile.write(chunk)
                except OSError:
                    pass
                return
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("body, said", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    (b"[1, 2, 3]", "is a JSON list, not an object"),
    (b'{"action": [1]}', "'action' that is a list"),
    (b'{"action": {"properties": [1]}}', "'action.properties' that is not an object"),
    (b'{"action": {"required": [{"x": 1}]}}', "'action.required' that is not a list of field names"),
    (b"\xff\xfe not utf-8", "is not a JSON object"),
    (ENDLESS, f"more than {SCHEMA_MAX_BYTES:,} bytes"),
])
def test_a_hostile_schema_is_a_config_error_naming_the_server(body, said):
    server = _serve(body)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ConfigError) as caught:
            check_server(f"openenv:{url}")
    finally:
        server.shutdown()
        server.server_close()
    message = str(caught.value)
    assert "rollout.multi_turn.environment" in message and f"{url}/schema" in message and said in message, message


def test_field_names_from_the_server_are_shown_escaped_and_bounded():
    names = {f"f{i}\x1b[2J": {} for i in range(1000)}
    import json

    server = _serve(json.dumps({"action": {"properties": names}}).encode())
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ConfigError) as caught:
            check_server(f"openenv:{url}")
    finally:
        server.shutdown()
        server.server_close()
    message = str(caught.value)
    assert "\x1b" not in message and len(message) < 1500
