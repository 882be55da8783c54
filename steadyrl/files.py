"""Atomic file writes: a file steadyrl writes is either the old one or the new one, never a cut one.

    write to ``.<name>.tmp-<pid>`` in the same directory -> fsync it -> ``os.replace`` onto the
    name -> fsync the directory

A full disk or a kill in the middle leaves the previous file as it was (and at worst a hidden
temporary file, removed here on error): a ``config.yaml`` cut short still parses, with a
setting silently back at its default, so nothing a run reads back is written in place.
The directory fsync makes the rename itself survive a power cut. Used for ``config.yaml``,
``summary.json``, ``tracking.json``, the run marker and the ``*.jsonl`` rewrites; checkpoints
are whole directories renamed the same way (``steadyrl.run.checkpoint``).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text", "fsync_dir"]


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory (its entries: renames, new files). A no-op where the platform or file
    system refuses to (Windows, some network file systems)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring). Any error (a full
    disk: ``OSError`` ENOSPC) is raised, with ``path`` untouched and no temporary file left."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))
