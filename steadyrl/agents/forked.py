"""``process`` isolation for stateless calls (tools): one forked child per call.

Each child starts its own process group, runs the call, writes ``{"ok": value}`` or
``{"error": text}`` as JSON to a pipe and exits; the parent reads every pipe with one deadline and
kills the whole group of any child still running at it (what it spawned dies with it). Replies are
parsed as JSON, never unpickled, and capped in size; a child that dies without a reply (``os._exit``,
a signal, a memory limit) is an error naming how it ended.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

from .calls import CallResult, error_text

MAX_REPLY_BYTES = 1 << 20
"""A reply longer than this is cut off and the call counted as failed."""


def _child(thunk, write_fd: int) -> None:
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            reply = {"ok": thunk()}
            data = json.dumps(reply, default=str)
        except (Exception, SystemExit) as err:
            data = json.dumps({"error": error_text(err)})
        view = memoryview(data.encode())
        while view:
            view = view[os.write(write_fd, view[:65536]):]
    finally:
        os._exit(0)


def _start(thunk) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        _child(thunk, write_fd)
    os.close(write_fd)
    try:
        os.setpgid(pid, pid)
    except OSError:  # the child did it first, or has already exited
        pass
    return pid, read_fd


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def _exit_text(pid: int) -> str:
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"the call's process was killed by signal {os.WTERMSIG(status)}"
    return f"the call's process exited with code {os.WEXITSTATUS(status)} without a reply"


def _decode(data: bytes, pid: int) -> tuple[str, object]:
    if not data:
        return "error", _exit_text(pid)
    os.waitpid(pid, 0)
    if len(data) > MAX_REPLY_BYTES:
        return "error", f"the reply is longer than {MAX_REPLY_BYTES} bytes"
    try:
        reply = json.loads(data)
    except ValueError:
        return "error", "the call's process wrote a reply that is not JSON"
    return ("ok", reply["ok"]) if "ok" in reply else ("error", str(reply.get("error")))


def run_isolated(thunks: list, timeout_s: float) -> list[CallResult]:
    """Each thunk run in a child process of its own, all at once, within ``timeout_s``."""
    t0 = time.perf_counter()
    children = [_start(t) for t in thunks]
    buffers = {fd: bytearray() for _, fd in children}
    finished: dict[int, float] = {}
    open_fds = set(buffers)
    deadline = t0 + timeout_s
    while open_fds:
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk and len(buffers[fd]) <= MAX_REPLY_BYTES:
                buffers[fd] += chunk
            elif not chunk:
                open_fds.discard(fd)
                finished[fd] = time.perf_counter() - t0
    results = []
    for pid, fd in children:
        if fd in open_fds:  # still running at the deadline: the whole group goes
            _kill_group(pid)
            os.waitpid(pid, 0)
            results.append(CallResult("timeout", f"timed out after {timeout_s:g} s", timeout_s))
        else:
            _kill_group(pid)  # anything it left running in its group
            status, value = _decode(bytes(buffers[fd]), pid)
            results.append(CallResult(status, value, finished[fd]))
        os.close(fd)
    return results
