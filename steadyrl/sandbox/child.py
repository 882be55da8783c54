"""The processes of a sandbox: the *keeper*, the *init* and, below it, the *runner*.

::

    trainer ──fork, or exec of ``python -m steadyrl.sandbox.worker``──> keeper
      (own session, child subreaper, dies with the trainer; outside the sandbox's pid namespace)
        └──fork──> init (process 1 of a new pid namespace, own /proc; see :mod:`.nsinit`)
                     └──fork──> runner (runs target(request); stdout/stderr -> a pipe the keeper drains)

The runner talks to the trainer directly over a socket pair (requests in, JSON frames out). Its
parent is the init, never the trainer, and neither the keeper nor the trainer exists in its pid
namespace: the user's code cannot signal them, and ``SIGSTOP`` / ``SIGKILL`` to its parent (the
init) are dropped by the kernel. Where the kernel gives no pid namespace the init is a plain
process and those guarantees are lost (``Sandbox.isolation`` says which).

A *fresh* keeper (the trainer passed a :class:`~steadyrl.sandbox.Rebuild`) is a new interpreter:
it receives the pickled recipe of its target and the runner rebuilds the target from it, so the
worker holds nothing of the trainer's memory (no other reward's API key). A *forked* keeper is a
copy of the trainer and its target is inherited as it is (closures, open models).

Keeper: ``gc.freeze()`` (a forked keeper: a collection would write to every inherited object and
un-share the trainer's memory pages); a new session (``setsid``); parent-death signal SIGUSR1
(``prctl`` ``PR_SET_PDEATHSIG``) plus a check of its parent pid every 0.1 s, so it notices the
trainer's death either way and then kills the sandbox before exiting; child subreaper; every
inherited file descriptor above 2 replaced by ``/dev/null``; credentials removed from the
environment and the sandbox's tag added. Then it forks the init and loops: drain the runner's
output into a bounded tail, reap children, count the sandbox's processes. When the init ends
(because the runner did), or there are too many processes, or the trainer is gone, it kills
every member of the sandbox, notes why in the shared status area and exits.

Runner: parent-death signal SIGKILL (it dies with the init), stdout/stderr onto the keeper's
pipe, stdin ``/dev/null``, its target rebuilt (fresh), resource limits, then it serves requests
until end-of-file.
"""

from __future__ import annotations

import fcntl
import gc
import mmap
import os
import pickle
import select
import signal
import socket
import struct
import sys
import termios
import time
import traceback
import types
from dataclasses import dataclass

from . import nsinit, procs
from .frames import encode_reply, recv_request, send_frame
from .limits import Limits, apply_limits, arm_cpu_limit, scrub_environment, user_tasks

__all__ = ["Shared", "keeper_main", "describe_status"]

TICK_S = 0.1
COUNT_EVERY_S = 0.1
FULL_SCAN_S = 2.0


class Shared:
    """A small shared mapping (a ``memfd``, made before the keeper starts) the keeper writes and
    the trainer reads: a status line, what isolation the sandbox got, and the tail of the runner's
    output (``total bytes, tail length, status length, isolation length | status | isolation |
    tail``). Reading it needs no protocol: it is there even after a crash."""

    HEAD = struct.Struct("<QIII")
    STATUS_BYTES = 512
    ISOLATION_BYTES = 64

    def __init__(self, tail_bytes: int, fd: int | None = None):
        self.cap = tail_bytes
        size = self.HEAD.size + self.STATUS_BYTES + self.ISOLATION_BYTES + tail_bytes
        self.fd = fd
        if fd is None:
            self.fd = os.memfd_create("steadyrl-sandbox") if hasattr(os, "memfd_create") else None
            if self.fd is not None:
                os.ftruncate(self.fd, size)
        self.map = mmap.mmap(-1 if self.fd is None else self.fd, size)
        self.tail = bytearray()
        self.total = 0

    def close_fd(self) -> None:
        """The mapping stays; the descriptor goes (once the keeper has it)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def add_output(self, data: bytes) -> None:
        self.total += len(data)
        self.tail += data
        if len(self.tail) > self.cap:
            del self.tail[: len(self.tail) - self.cap]
        start = self.HEAD.size + self.STATUS_BYTES + self.ISOLATION_BYTES
        self.map[start:start + len(self.tail)] = self.tail
        self._head(2, len(self.tail), total=self.total)

    def set_status(self, text: str) -> None:
        self._text(self.HEAD.size, self.STATUS_BYTES, 3, text)

    def set_isolation(self, text: str) -> None:
        self._text(self.HEAD.size + self.STATUS_BYTES, self.ISOLATION_BYTES, 4, text)

    def _text(self, start: int, cap: int, field: int, text: str) -> None:
        data = text.encode("utf-8", "replace")[:cap]
        self.map[start:start + len(data)] = data
        self._head(field, len(data))

    def _head(self, field: int, value: int, total: int | None = None) -> None:
        head = list(self.HEAD.unpack_from(self.map))
        head[field - 1] = value
        if total is not None:
            head[0] = total
        self.HEAD.pack_into(self.map, 0, *head)

    def read(self) -> tuple[int, str, str]:
        """``(total output bytes, output tail, status)`` as the keeper last wrote them."""
        total, tail_len, status_len, _ = self.HEAD.unpack_from(self.map)
        tail_len, status_len = min(tail_len, self.cap), min(status_len, self.STATUS_BYTES)
        status = bytes(self.map[self.HEAD.size:self.HEAD.size + status_len]).decode("utf-8", "replace")
        start = self.HEAD.size + self.STATUS_BYTES + self.ISOLATION_BYTES
        tail = bytes(self.map[start:start + tail_len]).decode("utf-8", "replace")
        return total, tail, status

    def isolation(self) -> str:
        size = min(self.HEAD.unpack_from(self.map)[3], self.ISOLATION_BYTES)
        start = self.HEAD.size + self.STATUS_BYTES
        return bytes(self.map[start:start + size]).decode("utf-8", "replace")

    def close(self) -> None:
        self.close_fd()
        self.map.close()


def describe_status(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _reset_signals() -> None:
    """Default actions for the trainer's Python signal handlers (its SIGTERM checkpoint handler
    must not run here); SIGINT ignored (Ctrl-C is the trainer's)."""
    for sig in signal.valid_signals():
        try:
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _sweep_fds(keep: set[int]) -> None:
    """Every open descriptor above 2 not in ``keep`` becomes ``/dev/null``; 0-2 too. Replaced, not
    closed: a Python object of the trainer's that later closes "its" descriptor closes a
    ``/dev/null``, never a file the user's code opened under the same number."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in set(fds) | {0, 1, 2}:
        if fd in keep or fd == null:
            continue
        try:
            os.fstat(fd)
        except OSError:
            if fd > 2:
                continue
        try:
            os.dup2(null, fd, inheritable=fd <= 2)
        except OSError:
            pass
    os.close(null)


def keeper_main(target, sock: socket.socket, shared: Shared, limits: Limits, passthrough, tag: str,
                trainer: int, recipe: dict | None = None) -> None:
    """The keeper's whole life (never returns). ``target`` is the forked keeper's inherited target;
    a fresh keeper gets ``recipe`` instead (``{"target": pickled Rebuild, "sys_path": [...]}``)."""
    try:
        gc.freeze()  # the trainer's objects: never scanned here, so their pages stay shared
        try:
            os.setsid()
        except OSError:  # a fresh keeper was started in a session of its own
            pass
        _reset_signals()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # waitpid must see the init's exit status
        stop = []
        signal.signal(signal.SIGUSR1, lambda *_: stop.append("the trainer died"))
        procs.prctl(procs.PR_SET_PDEATHSIG, signal.SIGUSR1)
        if os.getppid() != trainer:
            os._exit(0)
        procs.prctl(procs.PR_SET_CHILD_SUBREAPER, 1)
        if sock.fileno() <= 2:  # a trainer started with stdio closed: keep it clear of fds 0-2
            sock = socket.socket(fileno=fcntl.fcntl(sock.detach(), fcntl.F_DUPFD, 3))
        _sweep_fds({sock.fileno()})
        out_r, out_w = os.pipe()  # above 2: the sweep filled 0-2 with /dev/null
        scrub_environment(passthrough)
        os.environ[procs.TAG_VAR] = tag
        tasks = user_tasks() if limits.processes is not None else 0  # the whole machine's, not the namespace's
        namespace = nsinit.new_pid_namespace()
        runner = _RunnerStart(target, recipe, sock, (out_r, out_w), shared, limits, tasks)
        init = os.fork()
        if init == 0:
            def start_runner(parent: int, own_proc: bool) -> None:
                shared.set_isolation(("fresh" if recipe else "forked") + (f",{namespace}" if namespace else "")
                                     + (",proc" if own_proc else ""))
                _runner_main(runner, parent)

            nsinit.init_main(start_runner, lambda status: shared.set_status(describe_status(status)),
                             namespace, (out_r, out_w, sock.fileno()))
        os.close(out_w)
        sock.close()
        reason = _keep(init, out_r, shared, limits, trainer, stop)
        procs.kill_all(os.getpid(), tag, with_keeper=False)
        _drain(out_r, shared)
        shared.set_status(reason)
    except BaseException as err:  # noqa: BLE001 - say why, then leave without running the trainer's code
        try:
            shared.set_status(f"the sandbox keeper failed: {type(err).__name__}: {err}")
        except Exception:  # noqa: BLE001
            pass
    os._exit(0)


def _drain(fd: int, shared: Shared) -> bool:
    """Read what the pipe holds now; ``False`` at end-of-file."""
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        shared.add_output(data)


def _keep(init: int, out_r: int, shared: Shared, limits: Limits, trainer: int, stop: list) -> str:
    """The keeper's loop; returns why it ended (the init's report of the runner's end, when it
    made one)."""
    os.set_blocking(out_r, False)
    keeper, open_, next_count, next_full, last_fork = os.getpid(), True, 0.0, 0.0, None
    poll = select.poll()
    poll.register(out_r, select.POLLIN)
    while True:
        if stop or os.getppid() != trainer:
            return "the trainer died"
        if not open_:
            time.sleep(TICK_S)
        elif poll.poll(int(TICK_S * 1000)):
            open_ = _drain(out_r, shared)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            if pid == init:
                _drain(out_r, shared)
                return shared.read()[2] or f"its init process ended ({describe_status(status)})"
        now = time.monotonic()
        if limits.processes is not None and now >= next_count:
            next_count = now + COUNT_EVERY_S
            forked = _last_pid()  # a scan of /proc only when some process was made since the last
            if forked == last_fork and now < next_full:
                continue
            last_fork, next_full = forked, now + FULL_SCAN_S
            count = len(procs.counted(procs.members(keeper)))
            if count > limits.processes:
                return f"more than limits.processes={limits.processes} processes ({count}): all were killed"


def _last_pid() -> str | None:
    """The pid the kernel handed out last (``/proc/loadavg``): it changes whenever any process forks."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[-1]
    except (OSError, IndexError):
        return None


class _Unbuilt:
    """The target of a fresh worker whose recipe could not be rebuilt: every call says why."""

    def __init__(self, why: str):
        self.why = why

    def __call__(self, request):
        raise RuntimeError(f"the worker could not rebuild its target from its recipe:\n{self.why}")


def _rebuild(recipe: dict):
    """A fresh runner's target, from the trainer's recipe (its sys.path first: the same modules)."""
    sys.path[:] = list(recipe.get("sys_path") or sys.path)
    try:
        return pickle.loads(recipe["target"])
    except BaseException:  # noqa: BLE001 - said at every call
        return _Unbuilt(traceback.format_exc(limit=-8))


@dataclass(frozen=True)
class _RunnerStart:
    """What the keeper hands its runner, made once before the init forks: the forked keeper's ``target``
    (or a fresh one's ``recipe`` to rebuild it from), the socket to the trainer, the output pipe ``(read
    end, write end)``, the ``shared`` area (the runner closes it), the ``limits`` and ``tasks`` for them."""

    target: object
    recipe: dict | None
    sock: socket.socket
    output: tuple[int, int]
    shared: Shared
    limits: Limits
    tasks: int


def _runner_main(start: _RunnerStart, parent: int) -> None:
    """The runner's whole life (never returns): its stdio, its target, its limits, then requests
    until end-of-file; ``parent``: the init's pid (a runner whose parent already died exits)."""
    code = 1
    try:
        procs.prctl(procs.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # the keeper's handler is not the user's
        out_r, out_w = start.output
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        for fd in (null, out_r, out_w):
            os.close(fd)
        start.shared.close()
        sys.stdout = open(1, "w", buffering=1, closefd=False, errors="replace")
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="replace")
        target = start.target
        if start.recipe is not None:
            target = _rebuild(start.recipe)  # before the limits: building (imports, models) is not a call
            send_frame(start.sock, encode_reply({"ready": True}))  # the first call's time starts now
        apply_limits(start.limits, start.tasks)
        _serve(target, start.sock, start.limits)
        code = 0
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        _flush()
        os._exit(code)


def _flush(settle_s: float = 0.0) -> None:
    """Flush stdout / stderr; with ``settle_s``, wait (that long at most) until the keeper has read
    the pipe empty, so the output tail the trainer reads with the reply includes this call's."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream must not stop the worker
            pass
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        try:
            if struct.unpack("i", fcntl.ioctl(1, termios.FIONREAD, b"\0\0\0\0"))[0] == 0:
                return
        except OSError:
            return
        time.sleep(0.001)


def _serve(target, sock: socket.socket, limits: Limits) -> None:
    while True:
        try:
            request = recv_request(sock)
        except (OSError, EOFError):
            return
        arm_cpu_limit(limits)
        try:
            result = target(request)
            for part in (result if isinstance(result, types.GeneratorType) else [result]):
                try:
                    payload = encode_reply({"part": part})
                except (TypeError, ValueError) as err:
                    raise TypeError(f"the reply is not JSON data ({err})") from None
                send_frame(sock, payload)
            end = {"end": True}
        except BaseException as err:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too
            tb = err.__traceback__.tb_next if err.__traceback__ is not None else None
            end = {"error": "".join(traceback.format_exception(type(err), err, tb))}
        _flush(settle_s=0.1)
        send_frame(sock, encode_reply(end))
