"""``steadyrl export RUN [OUT] --push-to-hub REPO`` (issue 24, item 5): the exported model uploaded
to a Hugging Face Hub model repository, tested against a stand-in hub on 127.0.0.1 (``HF_ENDPOINT``
points ``huggingface_hub`` at it; nothing leaves the machine). The stand-in records every request
and answers the calls an upload makes: create the repository, check a README's metadata, ask how
each file is uploaded ("regular": inside the commit), and the commit itself, whose files the
tests read back.

A missing token or a malformed repository name is exit 2 before anything is exported or sent;
the token is sent to the hub (``Authorization``) and never printed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOKEN = "hf_standin_secret_0123456789"


class StandInHub:
    """The hub's create-repo, preupload and commit endpoints on a free loopback port."""

    def __init__(self, *, refuse: int | None = None):
        self.requests: list[dict] = []
        self.refuse = refuse  # answer every request with this status (401: a bad token)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status: int, payload) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                hub.requests.append({"method": "GET", "path": self.path, "auth": self.headers.get("Authorization")})
                self._reply(404, {"error": "not in the stand-in"})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hub.requests.append({"method": "POST", "path": self.path, "auth": self.headers.get("Authorization"),
                                     "body": body})
                if hub.refuse:
                    return self._reply(hub.refuse, {"error": "Invalid credentials in Authorization header"})
                path = self.path.split("?")[0]
                if path == "/api/repos/create":
                    name = json.loads(body)["name"]
                    org = json.loads(body).get("organization") or "standin-user"
                    return self._reply(200, {"url": f"{hub.url}/{org}/{name}", "name": f"{org}/{name}"})
                if path == "/api/validate-yaml":  # a README.md's metadata block, checked before the commit
                    return self._reply(200, {"errors": [], "warnings": []})
                if "/preupload/" in path:
                    files = json.loads(body)["files"]
                    return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                        "shouldIgnore": False} for f in files]})
                if "/commit/" in path:
                    repo = path.removeprefix("/api/models/").split("/commit/")[0]
                    return self._reply(200, {"commitUrl": f"{hub.url}/{repo}/commit/{'a' * 40}",
                                             "commitOid": "a" * 40})
                return self._reply(404, {"error": f"no {path} in the stand-in"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def committed_files(self) -> dict[str, bytes]:
        """``path in repo -> content`` of the commit the upload sent (NDJSON, files base64)."""
        commits = [r for r in self.requests if "/commit/" in r["path"]]
        assert len(commits) == 1, [r["path"] for r in self.requests]
        files = {}
        for line in commits[0]["body"].decode().splitlines():
            item = json.loads(line)
            if item["key"] == "file":
                files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
        return files


def _export(*args: str, hub: StandInHub | None, tmp_path: Path, token: str | None = TOKEN):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "HF_HOME": str(tmp_path / "hf"),
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "OMP_NUM_THREADS": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    if hub is not None:
        env["HF_ENDPOINT"] = hub.url
    if token is not None:
        env["HF_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "steadyrl", "export", *args], env=env, capture_output=True,
                          text=True, timeout=180)


@pytest.fixture
def run_dir(tmp_path, tiny_run):
    """A run directory as train leaves it: config.yaml, one checkpoint's policy and final/."""
    run = tmp_path / "run"
    policy = run / "checkpoints" / "step_000002" / "policy"
    shutil.copytree(tiny_run.model, policy)
    shutil.copytree(tiny_run.model, run / "final")
    (run / "final" / "README.md").write_text("the final model\n")  # tells final/ from an export of the checkpoint
    (run / "config.yaml").write_text(f"model:\n  name_or_path: {tiny_run.model}\n")
    return run


def test_push_to_hub_uploads_the_final_model_with_the_token(run_dir, tmp_path):
    with StandInHub() as hub:
        proc = _export(str(run_dir), "--push-to-hub", "me/tiny-rl", hub=hub, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"pushed {run_dir / 'final'} to {hub.url}/me/tiny-rl" in proc.stdout
    create = json.loads(hub.requests[0]["body"])
    assert hub.requests[0]["path"] == "/api/repos/create" and create["name"] == "tiny-rl"
    assert create["organization"] == "me"  # private by default (issue 30, item 6)
    assert create.get("visibility") == "private" or create.get("private") is True
    assert all(r["auth"] == f"Bearer {TOKEN}" for r in hub.requests)
    files = hub.committed_files()
    expected = {p.name for p in (run_dir / "final").iterdir()}
    assert set(files) == expected and files["README.md"] == b"the final model\n"
    assert files["config.json"] == (run_dir / "final" / "config.json").read_bytes()
    assert TOKEN not in proc.stdout + proc.stderr


def test_push_to_hub_of_a_step_exports_that_checkpoint_and_keeps_out(run_dir, tmp_path):
    out = tmp_path / "exported"
    with StandInHub() as hub:
        proc = _export(str(run_dir), str(out), "--step", "2", "--push-to-hub", "tiny-rl", "--private",
                       hub=hub, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    create = json.loads(hub.requests[0]["body"])
    assert create["visibility"] == "private" or create.get("private") is True  # huggingface_hub 2 / 0.x
    files = hub.committed_files()
    assert "README.md" not in files and "generation_config.json" in files  # the checkpoint's export, not final/
    assert files == {p.name: p.read_bytes() for p in out.iterdir()}


def test_token_flag_is_used_and_never_printed(run_dir, tmp_path):
    with StandInHub() as hub:
        proc = _export(str(run_dir), "--push-to-hub", "me/x", "--token", "hf_from_the_flag", hub=hub,
                       tmp_path=tmp_path, token=None)
    assert proc.returncode == 0, proc.stderr
    assert {r["auth"] for r in hub.requests} == {"Bearer hf_from_the_flag"}
    assert "hf_from_the_flag" not in proc.stdout + proc.stderr


def test_no_token_is_exit_2_before_anything_is_sent(run_dir, tmp_path):
    with StandInHub() as hub:
        proc = _export(str(run_dir), "--push-to-hub", "me/tiny-rl", hub=hub, tmp_path=tmp_path, token=None)
    assert proc.returncode == 2 and hub.requests == []
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a Hugging Face token" in lines[0] and "HF_TOKEN" in lines[0]


@pytest.mark.parametrize("name", ["me/../x", "a/b/c", "bad name", "x/" + "y" * 100])
def test_an_invalid_repository_name_is_exit_2_naming_it(run_dir, tmp_path, name):
    with StandInHub() as hub:
        proc = _export(str(run_dir), str(tmp_path / "out"), "--push-to-hub", name, hub=hub, tmp_path=tmp_path)
    assert proc.returncode == 2 and hub.requests == []
    assert f"--push-to-hub {name!r}" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before anything was exported


def test_a_refused_token_is_exit_2_with_the_hubs_answer_and_no_token(run_dir, tmp_path):
    with StandInHub(refuse=401) as hub:
        proc = _export(str(run_dir), "--push-to-hub", "me/tiny-rl", hub=hub, tmp_path=tmp_path)
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()
    assert len(line) == 1 and "the upload failed" in line[0] and "HF_TOKEN" in line[0]
    assert TOKEN not in proc.stderr


def test_export_without_out_or_push_is_exit_2(run_dir, tmp_path):
    proc = _export(str(run_dir), hub=None, tmp_path=tmp_path)
    assert proc.returncode == 2 and "OUT" in proc.stderr and "--push-to-hub" in proc.stderr
