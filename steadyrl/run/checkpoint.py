"""Checkpoints: everything a resumed run needs to continue exactly where it stopped.

A checkpoint ``checkpoints/step_000020/`` holds:

* ``policy/`` — the model and tokenizer (``save_pretrained``; LoRA runs save the adapter), ready to
  load with transformers or to pass to ``steadyrl eval --model``;
* ``critic/`` — the critic (PPO);
* ``state.pt`` — optimizer, critic optimizer and scheduler states, RNG states (Python, NumPy,
  torch CPU and CUDA), running reward statistics, KL controller, data position, counters: tensors
  and plain Python data only, read back with ``torch.load(weights_only=True)`` (a pickle of
  anything else could run code when loaded, and a run directory may come from someone else);
* ``trainer_state.json`` — the step and counters, human-readable.

Writing is atomic: everything goes to ``checkpoints/.tmp-step_000020`` first, which is renamed
only when complete, so a crash in the middle of a save leaves the previous checkpoint intact
and ``--resume`` never sees a half-written one. The newest ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..files import first_link
from ..files import fsync_dir as _fsync_dir
from ..errors import ConfigError
from ..model_files import shard_names, share_like_the_config
from ..models import safetensors_problem

CHECKPOINT_RE = re.compile(r"^step_(\d+)$")
OLD_RE = re.compile(r"^\.old-(step_\d+)-\d+$")  # a checkpoint moved aside while its step is re-saved


def rng_state() -> dict[str, Any]:
    """Every RNG's state in plain types (lists, ints, floats, tensors), which ``torch.load`` reads
    with ``weights_only=True``: NumPy's key array becomes a list of ints."""
    version, internal, gauss = random.getstate()
    name, key, pos, has_gauss, cached = np.random.get_state()
    state = {"python": [version, list(internal), gauss],
             "numpy": {"bit_generator": str(name), "key": [int(k) for k in key], "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = state["numpy"]
    if isinstance(numpy_state, dict):
        numpy_state = (numpy_state["bit_generator"], np.asarray(numpy_state["key"], dtype=np.uint32),
                       numpy_state["pos"], numpy_state["has_gauss"], numpy_state["cached_gaussian"])
    np.random.set_state(numpy_state)  # a tuple with an array: a checkpoint of an older version
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first. A checkpoint that is a symbolic link (or
    holds one) is refused (:class:`ConfigError`): resuming would load another directory's files,
    and pruning would delete them."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := CHECKPOINT_RE.match(p.name))
             and (p.is_dir() or p.is_symlink())]
    for _, p in found:
        links = [link] if (link := first_link(p)) is not None else []  # at any depth: policy/ too
        if links:
            raise ConfigError(f"checkpoint {str(links[0])!r} is a symbolic link (to {os.readlink(links[0])!r}); a run "
                              "reads and removes its own checkpoints only: replace the link by a copy, or remove it")
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: Path) -> Path | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


def save_checkpoint(root: Path, step: int, *, policy, tokenizer, state: dict[str, Any],
                    critic=None, keep: int = 2, policy_state_dict: dict | None = None) -> Path:
    """Write checkpoint ``step`` atomically and prune to the newest ``keep``.

    ``policy_state_dict``: the policy's full weights when ``policy`` itself holds only a shard
    (FSDP, gathered by :func:`steadyrl.distributed.full_model_state_dict`). ``tokenizer``: a
    vision-language model's processor where it has one (saved with its tokenizer's files)."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp-step_{step:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    _save_model(policy, tmp / "policy", policy_state_dict)
    tokenizer.save_pretrained(tmp / "policy")
    if critic is not None:
        critic.save_pretrained(tmp / "critic")
    torch.save(state, tmp / "state.pt")
    summary = {k: v for k, v in state.items() if isinstance(v, (int, float, str, bool)) or v is None}
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **summary}, indent=2))
    _fsync_tree(tmp)  # on disk before the rename, so a power cut cannot leave step_N empty
    if final.exists():  # re-saving a step (after a resume): swap, never leave a gap
        old = root / f".old-step_{step:06d}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    for stale in list_checkpoints(root)[:-keep]:
        shutil.rmtree(stale, ignore_errors=True)
    return final


def clean_partial(root: Path) -> None:
    """Remove what an interrupted save left behind.

    A save killed between the two renames of a swap (re-saving a step) leaves no ``step_N``,
    only the complete old copy ``.old-step_N-<pid>``: that copy is put back, not deleted.
    """
    if not root.is_dir():
        return
    for p in sorted(root.iterdir()):
        if (m := OLD_RE.match(p.name)) and not (root / m.group(1)).exists():
            os.replace(p, root / m.group(1))
    for p in root.iterdir():
        if p.name.startswith((".tmp-", ".old-")):
            shutil.rmtree(p, ignore_errors=True)


def _legacy_numpy_globals() -> list:
    """What an older version's ``state.pt`` needs besides plain types: NumPy's RNG key array
    (``np.random.get_state()`` as it was). Rebuilding an array runs no code of the file's choosing;
    an object array's items go through the same restricted unpickler."""
    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load_state(checkpoint: Path) -> dict[str, Any]:
    """``state.pt`` read with ``weights_only=True``: tensors and plain Python data only, so a
    run directory cannot run code through its checkpoint (a pickle may name any callable to
    call on load). Anything else is refused with a :class:`ConfigError` naming the file."""
    path = checkpoint / "state.pt"
    try:
        with torch.serialization.safe_globals(_legacy_numpy_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        what = str(err).split("WeightsUnpickler error:")[-1].strip().splitlines()[0] if str(err) else ""
        raise ConfigError(
            f"checkpoint {str(path)!r} holds objects other than tensors and plain data ({what}); steadyrl "
            "writes only those, and loading anything else could run code from the file: refused. Resume "
            "from another checkpoint (delete this one) or start a new run") from None


def read_model_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The full weights saved by :func:`_save_model` (one or several safetensors files)."""
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    index = directory / "model.safetensors.index.json"
    try:
        files = shard_names(index) if index.is_file() else ["model.safetensors"]
    except ValueError as err:  # a name outside the checkpoint ('..', absolute): refused, never joined
        raise ConfigError(f"checkpoint {err}; resume from another checkpoint (delete this one) or start a new "
                          "run") from None
    for name in files:
        problem = safetensors_problem(directory / name) if (directory / name).is_file() else "it is missing"
        if problem:  # a damaged file is named, not a traceback from the reader
            raise ConfigError(f"checkpoint weight file {str(directory / name)!r}: {problem}; resume from another "
                              "checkpoint (delete this one) or start a new run")
        state.update(load_file(directory / name))
    return state


def load_model_weights(model, directory: Path) -> None:
    """Load weights saved by :func:`_save_model` into an already built ``model``."""
    from safetensors.torch import load_file

    if hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(directory / "adapter_model.safetensors"))
        return
    state = read_model_weights(directory)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    really_missing = [k for k in missing if k not in tied and not k.endswith("lm_head.weight")]
    if (really_missing or unexpected) and hasattr(model, "from_pretrained"):
        # save_pretrained writes some models' weights under their hub names (LLaVA's
        # ``language_model.model.*`` for ``model.language_model.*``); from_pretrained maps them back
        loaded = type(model).from_pretrained(directory, dtype=next(model.parameters()).dtype)
        missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
        really_missing = [k for k in missing if k not in tied and not k.endswith("lm_head.weight")]
        del loaded
    if really_missing or unexpected:
        raise RuntimeError(f"checkpoint {directory} does not match the model: missing {really_missing[:5]}, "
                           f"unexpected {unexpected[:5]}")


def _save_model(model, directory: Path, state_dict: dict | None = None) -> None:
    model = getattr(model, "module", model)
    if state_dict is None:
        model.save_pretrained(directory, safe_serialization=True)
    else:
        model.save_pretrained(directory, state_dict=state_dict, safe_serialization=True)
    share_like_the_config(directory)  # safetensors writes 0600


def _fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then every directory (deepest first). Without it the
    rename can reach the disk before the data: after a power cut ``step_N`` exists with empty
    files, and the older checkpoints that pruning removed are gone."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(directory))
