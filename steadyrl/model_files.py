"""Checks of a model directory or hub name that load nothing and need no torch: a local path that
does not exist or is not a ``save_pretrained`` directory, damaged safetensors files, a hub name
that is neither cached nor reachable. The command line runs them before torch is imported
(:mod:`steadyrl.preflight.inputs`); :mod:`steadyrl.models` re-exports them.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import urllib.parse
from pathlib import Path

from .errors import ModelLoadError

_MAX_HEADER_BYTES = 100 * 2**20
"""The safetensors format's own bound on a file's JSON header."""


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with the safetensors file ``path``, read from its header alone (no tensor is
    loaded), or None: the header's length and JSON, and every tensor's bytes inside the file (a
    shard cut short by a copy or a full disk ends before its last tensor)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 0 < length <= min(_MAX_HEADER_BYTES, size - 8):
                return f"its header is damaged (a header of {length} bytes in a file of {size} bytes)"
            header = json.loads(f.read(length))
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    except ValueError:
        return "its header is not valid JSON (the file is damaged)"
    if not isinstance(header, dict):
        return "its header is not a mapping of tensors (the file is damaged)"
    data = size - 8 - length
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            return f"its header is damaged (tensor {name!r} has no valid data_offsets)"
        if offsets[1] > data:
            return (f"it is cut short: tensor {name!r} ends at byte {offsets[1]} of the data, which holds "
                    f"{data} bytes (an interrupted copy or download?)")
    return None


def shard_names(index: Path) -> list[str]:
    """The shard files a safetensors index's ``weight_map`` names, sorted: each must be a plain
    ``*.safetensors`` file name beside the index. A name with a path in it (``../x``, ``/etc/x``,
    ``a/b``) would be joined to the directory and read from anywhere: ``ValueError`` naming it."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        names = sorted({v for v in weight_map.values()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"{str(index)!r} is not a valid safetensors index (a JSON object with a weight_map)") from None
    for name in names:
        if not (isinstance(name, str) and name.endswith(".safetensors") and name not in (".", "..")
                and Path(name).name == name and "\\" not in name and "\0" not in name):
            raise ValueError(f"{str(index)!r}: weight_map names the shard {name!r}; a shard must be a plain "
                             "*.safetensors file name in the model's directory (no folder, no '..', not absolute)")
    return names


def check_weight_files(field: str, directory: Path) -> None:
    """Refuse (:class:`ModelLoadError` naming the file) a model directory whose safetensors files
    are damaged or cut short, or whose index names a shard that is missing or outside the
    directory (:func:`shard_names`), before any is loaded."""
    index = directory / "model.safetensors.index.json"
    names = set()
    if index.is_file():
        try:
            names = set(shard_names(index))
        except ValueError as err:
            raise ModelLoadError(f"{field}: {err}; the model directory is damaged") from None
    for name in sorted(names | {p.name for p in directory.glob("*.safetensors")}):
        path = directory / name
        problem = "it is missing (the index names it)" if not path.is_file() else safetensors_problem(path)
        if problem:
            raise ModelLoadError(f"{field}: weight file {str(path)!r}: {problem}; copy the model again")


def check_model_source(field: str, name: str) -> None:
    """Fail early and clearly for a local path that does not exist, or whose weight files are
    damaged (:func:`check_weight_files`). Anything that is not an existing path and reads like
    ``org/name`` or ``name`` is a hub name, left to transformers."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{field} = {name!r} is a file; expected a directory written by save_pretrained")
        if not any((path / f).is_file() for f in ("config.json", "adapter_config.json", "tokenizer_config.json",
                                                  "tokenizer.json")):
            raise ModelLoadError(f"{field} = {name!r} is a directory without config.json or tokenizer files; "
                                 "expected a directory written by save_pretrained")
        check_weight_files(field, path)
        return
    if name.startswith(("/", "./", "../", "~")) or name.count("/") > 1 or name.endswith("/"):
        raise ModelLoadError(f"{field} = {name!r}: no such directory")
    check_hub_reachable(field, name)


_TRUE = {"1", "on", "yes", "true"}


def hub_offline() -> bool:
    import huggingface_hub.constants as hub

    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return bool(hub.HF_HUB_OFFLINE) or any(flag.strip().lower() in _TRUE for flag in flags)


@functools.lru_cache(maxsize=None)
def hub_unreachable(endpoint: str, timeout_s: float = 3.0) -> str | None:
    """Why the hub cannot be reached from here (name resolution or a TCP connect, within
    ``timeout_s``), or None. Behind a proxy nothing is tried: only the proxy knows."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    url = urllib.parse.urlsplit(endpoint)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return f"cannot connect to {endpoint} ({exc.strerror or type(exc).__name__})"
    return None


def check_hub_reachable(field: str, name: str) -> None:
    """A hub name must be in the local Hugging Face cache, or the hub must be reachable: refused
    at once when it is not, instead of after the minute that transformers spends in retries."""
    import huggingface_hub.constants as hub
    from huggingface_hub.file_download import repo_folder_name

    cached = Path(hub.HF_HUB_CACHE) / repo_folder_name(repo_id=name, repo_type="model") / "snapshots"
    if cached.is_dir() and any(cached.iterdir()):
        return
    where = f"it is not a local directory and not in the Hugging Face cache ({hub.HF_HUB_CACHE})"
    fix = ("download it first on a machine with network (huggingface-cli download NAME, then copy the "
           "cache or set HF_HOME), or point to a local directory")
    if hub_offline():
        raise ModelLoadError(f"{field} = {name!r}: {where}, and the machine is offline (HF_HUB_OFFLINE=1): "
                             f"{fix.replace('NAME', name)}")
    why = hub_unreachable(hub.ENDPOINT)
    if why:
        raise ModelLoadError(f"{field} = {name!r}: {where}, and the hub cannot be reached: {why}; "
                             f"{fix.replace('NAME', name)}")



def check_model_paths(config, model_path: str) -> None:
    """Every model path a run of ``config`` loads (policy, tokenizer, critic), checked before any is loaded."""
    m = config.model
    check_model_source("model.name_or_path", model_path)
    if m.tokenizer:
        check_model_source("model.tokenizer", m.tokenizer)
    if config.algorithm.advantage_estimator == "gae" and m.critic_name_or_path:
        check_model_source("model.critic_name_or_path", m.critic_name_or_path)


def share_like_the_config(directory: Path) -> None:
    """Give the weight files in ``directory`` (``*.safetensors``, any depth) the permissions of the
    ``config.json`` written beside them (the umask's, usually 0644): the safetensors library writes
    its files 0600 whatever the umask, so a model directory another user or a serving container
    reads was half unreadable."""
    directory = Path(directory)
    for weights in directory.rglob("*.safetensors"):
        config = weights.parent / "config.json"
        if not config.is_file():
            config = directory / "config.json"
        mode = config.stat().st_mode & 0o777 if config.is_file() else 0o644
        os.chmod(weights, mode)
