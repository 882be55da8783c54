"""Atomic file writes: a file steadyrl writes is either the old one or the new one, never a cut one.

    write to ``.<name>.tmp-<pid>`` in the same directory -> fsync it -> ``os.replace`` onto the
    name -> fsync the directory

A full disk or a kill in the middle leaves the previous file as it was (and at worst a hidden
temporary file, removed here on error): a ``config.yaml`` cut short still parses, with a
setting silently back at its default, so nothing a run reads back is written in place.
The directory fsync makes the rename itself survive a power cut. Used for ``config.yaml``,
``summary.json``, ``tracking.json``, the run marker and the ``*.jsonl`` rewrites; checkpoints
are whole directories renamed the same way (``steadyrl.run.checkpoint``).

**Links are never followed.** A run directory may come from someone else, and a symbolic link in
it (``report.md -> ~/.ssh/authorized_keys``, ``metrics.jsonl -> /dev/zero``) would make a command
write or read a file the user never named. Every file steadyrl writes goes through
:func:`atomic_write_bytes`, which refuses (:class:`~steadyrl.errors.ConfigError`, exit 2, naming
the path) a link at the name and creates its temporary file with ``O_EXCL | O_NOFOLLOW``; every
file it reads from a run directory goes through :func:`read_bytes_nofollow`; :func:`regular_files`
lists a folder's plain files without entering linked folders (what ``export`` copies and uploads).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import ConfigError

__all__ = ["atomic_write_bytes", "atomic_write_text", "first_link", "fsync_dir", "read_bytes_nofollow",
           "read_text_nofollow", "refuse_link", "regular_files"]

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _link_error(path: Path, doing: str) -> ConfigError:
    return ConfigError(f"{str(path)!r} is a symbolic link: steadyrl never follows a link inside a run directory "
                       f"(it would {doing} the file the link points to, which you did not name); replace the "
                       "link by a plain file, or remove it")


def refuse_link(path: str | os.PathLike, doing: str = "read or write") -> None:
    """:class:`ConfigError` naming ``path`` when it is a symbolic link (dangling ones too)."""
    if Path(path).is_symlink():
        raise _link_error(Path(path), doing)


def read_bytes_nofollow(path: str | os.PathLike) -> bytes:
    """The bytes of the regular file ``path``, opened with ``O_NOFOLLOW``: a link is a
    :class:`ConfigError` naming it, as is a FIFO or device (``/dev/zero`` would never end);
    a missing file raises ``FileNotFoundError`` as ``open`` does."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if path.is_symlink():
            raise _link_error(path, "read") from None
        raise exc
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{str(path)!r} is not a regular file: steadyrl reads only plain files of a run "
                              "directory")
        return f.read()


def read_text_nofollow(path: str | os.PathLike) -> str:
    """:func:`read_bytes_nofollow` decoded as UTF-8 (undecodable bytes replaced)."""
    return read_bytes_nofollow(path).decode("utf-8", "replace")


def first_link(folder: str | os.PathLike) -> Path | None:
    """The first symbolic link under ``folder`` (``folder`` itself included), walked without
    following one; ``None`` when there is none."""
    folder = Path(folder)
    if folder.is_symlink():
        return folder
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs + files):
            if os.path.islink(os.path.join(root, name)):
                return Path(root) / name
    return None


def regular_files(folder: str | os.PathLike) -> list[Path]:
    """Every regular file under ``folder`` (relative paths, sorted), found without following a
    link: a linked file or folder is left out, whatever it points to."""
    folder = Path(folder)
    found = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in files:
            full = os.path.join(root, name)
            if stat.S_ISREG(os.lstat(full).st_mode):
                found.append(Path(full).relative_to(folder))
    return sorted(found)


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
    disk: ``OSError`` ENOSPC) is raised, with ``path`` untouched and no temporary file left. A
    symbolic link at ``path`` is refused (:class:`ConfigError`): see the module docstring."""
    path = Path(path)
    refuse_link(path, "overwrite")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)  # a stale one (a recycled PID), or a link planted there: removed, never written through
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o666)  # as open() does, umask applied
        with os.fdopen(fd, "wb") as f:
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
