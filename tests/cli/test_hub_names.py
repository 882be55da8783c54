"""A hub model name is checked before transformers spends a minute in retries: in the local
Hugging Face cache it is fine; otherwise an offline machine (HF_HUB_OFFLINE=1) or a hub that
cannot be reached is exit status 2 at once, with a message that says what to do."""

from __future__ import annotations

import socket

import huggingface_hub.constants
import pytest
import transformers

from steadyrl import cli, models
from steadyrl.errors import ModelLoadError

NAME = "some-org/some-model-that-is-not-cached"


@pytest.fixture
def no_hub_calls(monkeypatch):
    """transformers must not be asked to fetch anything: that is where the retries are."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"transformers was asked to load {args[:1]}")

    for cls in (transformers.AutoTokenizer, transformers.AutoConfig, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(cls, "from_pretrained", refuse)


@pytest.fixture
def online(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    models.hub_unreachable.cache_clear()
    yield
    models.hub_unreachable.cache_clear()


def test_offline_and_not_cached_is_exit_2_before_transformers_is_asked(tiny_run, tmp_path, monkeypatch, capsys,
                                                                      no_hub_calls):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = cli.main(["eval", str(tiny_run.config), "--model", NAME])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"model.name_or_path = {NAME!r}: it is not a local directory and not in the Hugging Face cache" in err[0]
    assert "offline (HF_HUB_OFFLINE=1)" in err[0] and f"huggingface-cli download {NAME}" in err[0]


def test_an_unreachable_hub_is_an_error_at_once(online, monkeypatch, no_hub_calls):
    tries = []

    def no_network(address, timeout=None):
        tries.append((address, timeout))
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(models.socket, "create_connection", no_network)
    with pytest.raises(ModelLoadError, match=r"the hub cannot be reached: cannot connect to https://huggingface.co "
                                             r"\(Name or service not known\)"):
        models.load_tokenizer(NAME, field="model.name_or_path")
    with pytest.raises(ModelLoadError):
        models.check_model_source("model.tokenizer", NAME)
    assert tries == [(("huggingface.co", 443), 3.0)]  # tried once, with a short time limit


def test_a_cached_hub_name_passes_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    (tmp_path / "models--some-org--some-model-that-is-not-cached" / "snapshots" / "abc123").mkdir(parents=True)
    models.check_model_source("model.name_or_path", NAME)


def test_behind_a_proxy_no_direct_connection_is_tried(online, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setattr(models.socket, "create_connection",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("connected directly")))
    models.check_model_source("model.name_or_path", NAME)
