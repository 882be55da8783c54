"""``steadyrl export`` never follows a link (issue 30, item 6): a symbolic link inside ``final/`` or a
checkpoint's ``policy/`` pointing at a secret (the hub token) is neither copied nor uploaded; the
command refuses it (exit 2, naming the link) before anything is sent. An existing OUT is replaced
only with ``--overwrite``; a pushed repository is private unless ``--public``.
"""

from __future__ import annotations

import json

import pytest

from .test_push_to_hub import StandInHub, _export, run_dir  # noqa: F401  (the fixture)

SECRET = "hf_the_exporters_own_token_0123456789"


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "home" / "token"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def _sent(hub: StandInHub) -> bytes:
    return b"".join(r.get("body") or b"" for r in hub.requests)


@pytest.mark.parametrize("where", ["final/notes.txt", "final/sub", "checkpoints/step_000002/policy/notes.txt"])
def test_a_link_to_a_secret_is_refused_and_never_uploaded(run_dir, tmp_path, secret, where):  # noqa: F811
    link = run_dir / where
    link.symlink_to(secret if where.endswith(".txt") else secret.parent)
    args = ["--push-to-hub", "me/tiny-rl"] + (["--step", "2"] if "checkpoints" in where else [])
    with StandInHub() as hub:
        proc = _export(str(run_dir), *args, hub=hub, tmp_path=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert str(link) in proc.stderr and "symbolic link" in proc.stderr
    assert SECRET.encode() not in _sent(hub) and not any("/commit/" in r["path"] for r in hub.requests)
    assert SECRET not in proc.stdout + proc.stderr


def test_a_link_in_the_checkpoint_is_not_copied_into_out(run_dir, tmp_path, secret):  # noqa: F811
    (run_dir / "checkpoints" / "step_000002" / "policy" / "notes.txt").symlink_to(secret)
    out = tmp_path / "out"
    proc = _export(str(run_dir), str(out), hub=None, tmp_path=tmp_path)
    assert proc.returncode == 2 and "notes.txt" in proc.stderr and not out.exists()


def test_regular_files_lists_no_link_and_enters_no_linked_folder(tmp_path, secret):
    from steadyrl.files import regular_files

    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "sub" / "a.txt").write_text("a")
    (folder / "token").symlink_to(secret)
    (folder / "home").symlink_to(secret.parent)
    assert [p.as_posix() for p in regular_files(folder)] == ["config.json", "sub/a.txt"]


def test_the_default_push_is_private(run_dir, tmp_path):  # noqa: F811
    with StandInHub() as hub:
        proc = _export(str(run_dir), "--push-to-hub", "me/tiny-rl", hub=hub, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    create = json.loads(hub.requests[0]["body"])
    assert create.get("visibility") == "private" or create.get("private") is True


def test_public_flag_makes_the_repository_public(run_dir, tmp_path):  # noqa: F811
    with StandInHub() as hub:
        proc = _export(str(run_dir), "--push-to-hub", "me/tiny-rl", "--public", hub=hub, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    create = json.loads(hub.requests[0]["body"])
    assert create.get("private") in (None, False) and create.get("visibility") in (None, "public")


def test_export_to_an_existing_out_needs_overwrite(run_dir, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    proc = _export(str(run_dir), str(out), hub=None, tmp_path=tmp_path)
    assert proc.returncode == 2 and f"OUT {str(out)!r} already exists" in proc.stderr and "--overwrite" in proc.stderr
    assert (out / "mine.txt").read_text() == "keep me"
    proc = _export(str(run_dir), str(out), "--overwrite", hub=None, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "mine.txt").exists() and (out / "config.json").is_file()
