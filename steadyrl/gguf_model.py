"""``model.gguf_file``: train from a GGUF file directly, converted once into a cached model directory.

transformers de-quantises a GGUF (llama.cpp's format) into an ordinary causal LM with its tokenizer
and chat template (:mod:`steadyrl.convert`, what ``steadyrl convert`` writes). A run that names
``model.gguf_file`` gets that directory without a separate step: the first run converts the file
into ``$STEADYRL_CACHE/gguf/<key>`` (default ``~/.cache/steadyrl/gguf``; the key is the file's
resolved path, size and modification time, so an edited file is converted again), later runs
reuse it, and the policy, the reference and the tokenizer load from it as from any
``model.name_or_path`` directory.

Where the file is: ``model.gguf_file`` is a path; with ``model.name_or_path`` set too it is the name
of a file in that local directory (transformers' ``gguf_file=`` convention). Bad input exits 2
naming ``model.gguf_file``: a missing file, a file that is not a GGUF, a GGUF that is not a causal
LM transformers can load (an encoder, a vocabulary-only file).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .errors import ConfigError, ModelLoadError


def cache_dir() -> Path:
    return Path(os.environ.get("STEADYRL_CACHE") or Path.home() / ".cache" / "steadyrl") / "gguf"


def gguf_path(model_config) -> Path:
    """The GGUF file ``model.gguf_file`` names (see the module docstring)."""
    name = Path(model_config.gguf_file).expanduser()
    if model_config.name_or_path and not name.is_absolute():
        return Path(model_config.name_or_path).expanduser() / name
    return name


def _key(path: Path) -> str:
    stat = path.stat()
    text = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    return f"{path.stem[:60]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def check_gguf_file(config) -> None:
    """``model.gguf_file`` names a GGUF that can become a causal LM: checked from its header, without
    converting it (nor importing torch). ``ConfigError`` naming ``model.gguf_file`` if not."""
    from .convert import check_causal_lm, read_gguf

    try:
        check_causal_lm(read_gguf(gguf_path(config.model)))
    except ModelLoadError as exc:
        raise ConfigError(f"model.gguf_file = {config.model.gguf_file!r}: {exc}") from None


def model_source(config) -> str | None:
    """The directory or hub name the run's model loads from: ``model.name_or_path``, or for a
    ``model.gguf_file`` its converted copy (converted now if not cached). ``ConfigError`` naming
    ``model.gguf_file`` when the file cannot be a policy."""
    m = config.model
    if not m.gguf_file:
        return m.name_or_path
    from filelock import FileLock

    from .convert import convert_gguf

    check_gguf_file(config)
    path = gguf_path(m)
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    out = root / _key(path)
    with FileLock(str(out) + ".lock"):
        if not (out / ".complete").exists():
            try:
                convert_gguf(path, out, overwrite=True)
            except ModelLoadError as exc:
                raise ConfigError(f"model.gguf_file = {m.gguf_file!r}: {exc}") from None
            (out / ".complete").write_text(str(path.resolve()))
    return str(out)
