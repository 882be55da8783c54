"""The file-system view of a ``code`` program: the bubblewrap (``bwrap``) command that starts the
harness (:mod:`.harness`) in a fresh, minimal root built for it - not the host's with parts hidden.

What the program sees (everything read-only but ``/tmp``)::

    /usr, and /bin /lib /lib64 /sbin as the host has them (links into /usr, or bound)
    /etc/ld.so.cache, /etc/localtime                (nothing else of /etc: no passwd, no shadow)
    the interpreter's prefixes (sys.prefix, sys.base_prefix, where its executable lives), at their
    own paths, even under /root (a venv, pyenv, uv, conda): bound, not reached through /root
    /.steadyrl: the harness's three files
    the folders above those prefixes: made ``0755`` and empty but for the way down (bubblewrap would
    make them ``0700``, and ``nobody`` could not import the standard library)
    /proc (of its own pid namespace), /dev (null, zero, random, urandom, tty, ...)
    /dev/shm: a writable tmpfs of its own, at most ``tmp_bytes`` (multiprocessing's locks and queues)
    /tmp: a tmpfs of its own, at most ``tmp_bytes`` (the work directory and the tests' inputs)

and no /root, /home, /run, /var, host /tmp, data files or sockets. bwrap also gives it new IPC,
pid, network (unless asked otherwise), UTS and cgroup namespaces, kills it when the caller dies
(``--die-with-parent``) and starts it in a new session (no terminal injection). Run as root, bwrap
builds the view with root's rights (so a prefix under a ``0700`` /root can be bound) and keeps only
``CAP_SETUID`` / ``CAP_SETGID``, with which the harness becomes ``nobody`` before anything else;
run as another user, bwrap adds a user namespace and the program keeps that user's uid.

Choosing bubblewrap over nsjail and the hand-written namespaces: docs/rewards.md, "The local sandbox".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["bwrap_path", "view_command", "interpreter_prefixes", "HARNESS_DIR", "HARNESS_IN_VIEW"]

HARNESS_DIR = str(Path(__file__).parent)
HARNESS_IN_VIEW = "/.steadyrl"
HARNESS_FILES = ("harness.py", "harness_os.py", "harness_calls.py")
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")
_PREFIXES: dict[str, list[str]] = {}
_ASK_PREFIXES = ("import json, os, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
                 "sys.base_exec_prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))]))")


BWRAP_DIRS = "/usr/bin:/bin:/usr/local/bin:/usr/sbin:/sbin"
"""Looked in after the caller's ``PATH``."""


def bwrap_path() -> str | None:
    """Where ``bwrap`` is installed (on the caller's ``PATH``, then in :data:`BWRAP_DIRS`), or ``None``."""
    return shutil.which("bwrap") or shutil.which("bwrap", path=BWRAP_DIRS)


def _covered(path: str, by: str) -> bool:
    return path == by or path.startswith(by.rstrip("/") + "/")


def interpreter_prefixes(python: str) -> list[str]:
    """The directories ``python`` needs (its prefixes and executable's home), outside ``/usr``;
    asked once per interpreter. Raises ``OSError`` when the interpreter cannot say."""
    if python not in _PREFIXES:
        try:
            out = subprocess.run([python, "-I", "-c", _ASK_PREFIXES], capture_output=True, timeout=30, check=True,
                                 env={"PATH": "/usr/bin:/bin"}).stdout
            found = json.loads(out)
        except (subprocess.SubprocessError, ValueError) as err:
            raise OSError(f"cannot ask {python!r} where its library is: {err}") from None
        # the path the caller names too: a venv's bin/python may be a link chain through it
        found.append(os.path.dirname(os.path.dirname(os.path.abspath(python))))
        keep: list[str] = []
        for path in sorted({os.path.abspath(p) for p in found}, key=len):
            if path == "/" or _covered(path, "/usr") or any(_covered(path, k) for k in keep):
                continue
            keep.append(path)
        _PREFIXES[python] = keep
    return _PREFIXES[python]


def _root_links() -> list[str]:
    args = []
    for name in _ROOT_LINKS:
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _parents(prefixes: list[str]) -> list[str]:
    """The folders above ``prefixes`` that the view must make (outside ``/usr`` and ``/tmp``), top first:
    bubblewrap would make them ``0700``, and ``nobody`` could not reach the interpreter's library."""
    found: set[str] = set()
    for prefix in prefixes:
        parent = os.path.dirname(prefix)
        while parent not in ("/", "") and not _covered(parent, "/usr"):
            found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found, key=lambda p: (p.count("/"), p))


def view_command(python: str, *, tmp_bytes: int, network: bool) -> list[str]:
    """The command that runs the harness with ``python`` in the view (module docstring);
    ``network``: a network namespace of its own (no interface up)."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise OSError("bwrap is not installed")
    args = [bwrap, "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
            "--unshare-cgroup-try"]
    args += ["--unshare-net"] if network else []
    if os.getuid() == 0:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user"]
    # the private /tmp first: an interpreter (a venv, a clone) under the host's /tmp is bound on top of it
    args += ["--perms", "01777", "--size", str(int(tmp_bytes)), "--tmpfs", "/tmp"]
    args += ["--ro-bind", "/usr", "/usr", *_root_links()]
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    prefixes = interpreter_prefixes(python)
    for parent in _parents(prefixes):  # made 0755 (not bubblewrap's 0700), holding nothing but the way down
        if parent != "/tmp":
            args += ["--perms", "0755", "--dir", parent]
    for prefix in prefixes:
        args += ["--ro-bind", prefix, prefix]
    for name in HARNESS_FILES:
        args += ["--ro-bind", os.path.join(HARNESS_DIR, name), f"{HARNESS_IN_VIEW}/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # a private /dev/shm (POSIX semaphores and shared memory: multiprocessing's Lock, Queue, Pool)
    args += ["--perms", "01777", "--size", str(int(tmp_bytes)), "--tmpfs", "/dev/shm"]
    args += ["--chdir", "/tmp", "--", python, "-I", f"{HARNESS_IN_VIEW}/harness.py"]
    return args
