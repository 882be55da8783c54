"""``Sandbox``: the trainer's handle on one persistent worker (a keeper, an init and a runner).

The worker is started on the first call and kept: state the target keeps between calls lives
there. A target given as a :class:`Rebuild` gets a *fresh* worker (a new interpreter, exec'd,
that rebuilds the target from its recipe and holds nothing else of the trainer's); any other
callable a *forked* one (a copy of the trainer, target inherited as it is: for trusted code).
A time-out, a broken reply or a dead runner kills the whole sandbox (every member, see
:mod:`steadyrl.sandbox.procs`); the next call starts a new one.
"""

from __future__ import annotations

import os
import pickle
import secrets
import socket
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import Literal

from . import procs
from .child import Shared, describe_status, keeper_main
from .forking import fork_child
from .frames import MAX_FRAME_BYTES, FrameError, FrameReader, deadline_after, send_frame
from .limits import Limits, worker_environment

__all__ = ["Sandbox", "Call", "Rebuild", "Reply", "SandboxUnavailable", "output_note"]

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The folder holding the ``steadyrl`` package this process runs: a fresh worker imports the same one."""


def _build(factory, args: tuple, kwargs: dict):
    return factory(*args, **kwargs)


class Rebuild:
    """A sandbox target given by the recipe that makes it: ``Rebuild(factory, *args, **kwargs)``.

    ``Sandbox(Rebuild(...))`` starts a *fresh* worker - a new interpreter, not a fork of the
    trainer - and calls ``factory(*args, **kwargs)`` there once; what it returns is the target.
    ``factory`` must be importable by name (a module-level function or class), ``args`` and
    ``kwargs`` picklable: they are all the worker receives of the trainer, so a secret the target
    needs (its own API key) goes in them and nothing else does. In the trainer (thread and inline
    isolation) calling a ``Rebuild`` builds the target once and calls it."""

    def __init__(self, factory, *args, **kwargs):
        if not callable(factory):
            raise TypeError(f"Rebuild: factory must be callable, got {type(factory).__name__}")
        self.factory, self.args, self.kwargs = factory, args, kwargs
        self._built = None

    def __reduce__(self):
        return _build, (self.factory, self.args, self.kwargs)

    def __call__(self, request):
        if self._built is None:
            self._built = _build(self.factory, self.args, self.kwargs)
        return self._built(request)

FRESH_START_GRACE_S = 30.0
"""Time a fresh worker may take to start (a new interpreter that imports and rebuilds the target:
a tool module that imports torch takes seconds, more on a loaded machine) before its first call's
own time limit starts, at the worker's ``ready`` frame. Without it a short tool time limit killed
every fresh worker before its first call, and the next call started another, for ever."""

REAP_GRACE_S = 1.0
"""How long ``close`` lets an idle worker exit on its own, and a failed call waits for the keeper's
report, before killing."""


MESSAGE_OUTPUT_CHARS = 4096
"""How much of the worker's output tail a failure message quotes (``Reply.output`` has it all)."""


def output_note(output: str, output_bytes: int | None = None) -> str:
    """The tail of the worker's output, for the end of a failure message ("" when it printed nothing)."""
    if not output:
        return ""
    size = len(output.encode("utf-8", "replace")) if output_bytes is None else output_bytes
    if len(output) > MESSAGE_OUTPUT_CHARS:
        output = output[-MESSAGE_OUTPUT_CHARS:]
    shown = len(output.encode("utf-8", "replace"))
    what = "all of it" if shown >= size else f"the last {shown:,} of {size:,} bytes in all"
    return f"\n--- the worker's output (stdout and stderr), {what} ---\n{output}"


class SandboxUnavailable(RuntimeError):
    """The sandbox could not be started or could not be sent the request (it was not run)."""


@dataclass(frozen=True)
class Reply:
    """What one call produced.

    ``status``: ``"ok"`` (the target returned), ``"error"`` (it raised: ``error`` holds the
    traceback), ``"timeout"`` (past the deadline; the sandbox was killed) or ``"died"`` (the
    worker died or sent a broken reply; the sandbox was killed). ``parts`` are the JSON-decoded
    values that arrived - one for a target that returns, one per ``yield`` for a generator - and are
    kept whatever the status. ``output`` is the tail of what the worker printed (its whole life;
    at most ``limits.output_kib``), ``output_bytes`` how much it printed in all.
    """

    status: Literal["ok", "error", "timeout", "died"]
    parts: list = field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0
    output: str = ""
    output_bytes: int = 0

    @property
    def value(self):
        """The last part (a plain target's return value); ``None`` if there is none."""
        return self.parts[-1] if self.parts else None


class _Proc:
    """The trainer's side of one worker: its keeper, forked (``recipe`` None) or exec'd fresh."""

    def __init__(self, target, limits: Limits, passthrough, max_frame: int, recipe: bytes | None = None):
        self.tag = f"{os.getpid()}-{secrets.token_hex(8)}"
        self.shared = Shared(limits.output_kib * 1024)
        self.popen = None
        mine, theirs = socket.socketpair()
        try:
            if recipe is None:
                pid = self._fork(target, theirs, limits, passthrough)
            else:
                pid = self._exec(recipe, mine, theirs, limits, passthrough)
        except (OSError, subprocess.SubprocessError):
            mine.close(), theirs.close(), self.shared.close()
            if self.popen is not None:
                self.popen.kill()
                self.popen.wait()
            raise
        theirs.close()
        self.shared.close_fd()
        self.pid, self.sock, self.reaped = pid, mine, None
        self.reader = FrameReader(mine, max_frame)

    def _fork(self, target, theirs, limits: Limits, passthrough) -> int:
        # the keeper never returns into the caller's stack, whatever happens (forking.py)
        return fork_child(keeper_main, target, theirs, self.shared, limits, tuple(passthrough), self.tag,
                          os.getpid())

    def _exec(self, recipe: bytes, mine, theirs, limits: Limits, passthrough) -> int:
        if not sys.executable or self.shared.fd is None:
            raise OSError("no Python executable or no memfd_create here to start a fresh worker with")
        path = os.pathsep.join(p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
        fds = (theirs.fileno(), self.shared.fd)
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "steadyrl.sandbox.worker", *map(str, fds), str(os.getpid())],
            pass_fds=fds, env=worker_environment(passthrough, {"PYTHONPATH": path}), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        boot = {"target": recipe, "limits": limits, "passthrough": tuple(passthrough), "tag": self.tag,
                "sys_path": list(sys.path)}
        send_frame(mine, pickle.dumps(boot, protocol=pickle.HIGHEST_PROTOCOL))
        return self.popen.pid

    def wait_keeper(self, timeout_s: float) -> str | None:
        """The keeper's exit status, waiting up to ``timeout_s``; ``None`` if still running."""
        deadline = time.monotonic() + timeout_s
        while self.reaped is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.reaped = "exit status unknown"
                if self.popen is not None:
                    self.popen.returncode = -1
                break
            if pid:
                self.reaped = describe_status(status)
                if self.popen is not None:  # reaped here: the Popen object must not wait for it
                    self.popen.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)
        return self.reaped

    def report(self) -> tuple[str, str, int]:
        """``(status, output tail, output bytes in all)`` from the keeper's shared area."""
        total, tail, status = self.shared.read()
        return status, tail, total

    def kill(self) -> None:
        """SIGKILL every member of the sandbox, then the keeper; reap the keeper."""
        try:
            self.sock.close()
        except OSError:
            pass
        if self.reaped is None:
            procs.kill_all(self.pid, self.tag)
            self.wait_keeper(5.0)
        else:  # the keeper is gone: what is left is found by session, group and tag
            procs.kill_all(self.pid, self.tag, with_keeper=False)

    def close(self) -> None:
        """End-of-file to the runner (it exits, the keeper cleans up and exits); kill if slow."""
        try:
            self.sock.close()
        except OSError:
            pass
        if self.wait_keeper(REAP_GRACE_S) is None:
            self.kill()


def _close_slot(slot: list) -> None:
    proc, slot[0] = slot[0], None
    if proc is not None:
        proc.close()
        proc.shared.close()


class Sandbox:
    """Runs ``target(request)`` in a persistent, contained worker process (Linux; needs ``fork``).

    A :class:`Rebuild` target gets a *fresh* worker (exec'd; the target is rebuilt there from its
    recipe: for anything that runs model-written code or that must not see the trainer's memory).
    Any other callable gets a *forked* worker, which inherits it as it is (closures, loaded
    modules, open models: nothing about it is pickled) together with a copy of everything else in
    the trainer's memory: for trusted code only. Each ``request`` is pickled to the worker; the
    reply is JSON. A target may ``return`` one JSON-able value or be a generator that
    ``yield``\\ s several (each sent as it is made, so a time-out keeps the parts already sent).

    The worker is started by the thread that makes the first call (and the first after a failure)
    and dies when *that thread* ends (``PR_SET_PDEATHSIG`` follows the forking thread): call from
    a thread that lives as long as the sandbox is used, such as the main thread. One call at a
    time: a ``submit`` while the previous call's reply is unread kills the worker and starts anew.
    """

    def __init__(self, target, *, limits: Limits | None = None, env_passthrough=(),
                 max_reply_bytes: int = MAX_FRAME_BYTES):
        if not callable(target):
            raise TypeError(f"target must be callable, got {type(target).__name__}")
        if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
            raise SandboxUnavailable("a sandbox needs Linux (fork, /proc, prctl)")
        self.target, self.limits = target, limits or Limits()
        self.env_passthrough, self.max_reply_bytes = tuple(env_passthrough), max_reply_bytes
        self.fresh = isinstance(target, Rebuild)
        self._recipe = pickle.dumps(target, protocol=pickle.HIGHEST_PROTOCOL) if self.fresh else None
        self._slot: list[_Proc | None] = [None]  # shared with the finalizer that closes the worker
        weakref.finalize(self, _close_slot, self._slot)
        self._busy = False

    @property
    def pid(self) -> int | None:
        """The keeper's pid while a worker is running (its session and process-group id too)."""
        return None if self._slot[0] is None else self._slot[0].pid

    @property
    def isolation(self) -> str | None:
        """What the running worker got, comma-separated: ``fresh`` or ``forked``; ``pid`` (or
        ``user+pid``) when it has its own pid namespace; ``proc`` when its ``/proc`` is its own.
        ``None`` before the first call; ``""`` while the runner is starting."""
        return None if self._slot[0] is None else self._slot[0].shared.isolation()

    @property
    def tag(self) -> str | None:
        """The value of ``STEADYRL_SANDBOX`` in the worker's environment."""
        return None if self._slot[0] is None else self._slot[0].tag

    def submit(self, request) -> Call:
        """Send ``request``; the reply is read by ``.wait(timeout_s)``. The deadline counts from here.
        Raises :class:`SandboxUnavailable` (nothing ran), or the pickling error for a request that
        cannot be pickled (the worker is unharmed)."""
        if self._busy:  # the previous call's reply was never read: it would be read as this one's
            self.kill()
        payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        grace = 0.0
        for _ in range(2):
            if self._slot[0] is None:
                grace = FRESH_START_GRACE_S if self.fresh else 0.0  # rebuilding the target is not the call's time
                try:
                    self._slot[0] = _Proc(self.target, self.limits, self.env_passthrough, self.max_reply_bytes,
                                          self._recipe)
                except OSError as err:
                    raise SandboxUnavailable(f"cannot start a worker process: {err}") from err
            try:
                send_frame(self._slot[0].sock, payload)
            except OSError:
                self.kill()  # it died between calls (the OOM killer, the user's code): fork a new one
                continue
            self._busy = True
            return Call(self, self._slot[0], time.monotonic() + grace)
        raise SandboxUnavailable("the worker process dies as soon as it starts")

    def call(self, request, timeout_s: float | None) -> Reply:
        """``submit(request).wait(timeout_s)``."""
        return self.submit(request).wait(timeout_s)

    def kill(self) -> None:
        """Kill the worker and everything it started (a new one is forked on the next call)."""
        proc, self._slot[0] = self._slot[0], None
        self._busy = False
        if proc is not None:
            proc.kill()
            proc.shared.close()

    def close(self) -> None:
        """Stop the worker (an idle one exits at once) and everything it started."""
        self._busy = False
        _close_slot(self._slot)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Call:
    """One request in flight; ``wait`` once."""

    def __init__(self, box: Sandbox, proc: _Proc, t0: float):
        self.box, self.proc, self.t0 = box, proc, t0

    def wait(self, timeout_s: float | None) -> Reply:
        deadline, parts = deadline_after(timeout_s, self.t0), []
        while True:
            try:
                frame = self.proc.reader.next(deadline)
            except EOFError:
                return self._failed("died", parts, "the worker process died")
            except FrameError as err:
                return self._failed("died", parts, f"the worker sent a broken reply: {err}", ended=False)
            if frame is None:
                return self._failed("timeout", parts, f"timed out after {timeout_s:g} s; the worker process "
                                    "and everything it started were killed (a new one is forked for the next call)")
            if "part" in frame:
                parts.append(frame["part"])
                continue
            if "ready" in frame:  # a fresh worker has rebuilt its target: the call's own time starts
                self.t0 = time.monotonic()
                deadline = deadline_after(timeout_s, self.t0)
                continue
            self.box._busy = False
            _, output, size = self.proc.report()
            if "error" in frame:
                return Reply("error", parts, str(frame["error"]), self._elapsed(), output, size)
            return Reply("ok", parts, None, self._elapsed(), output, size)

    def _elapsed(self) -> float:
        return max(0.0, time.monotonic() - self.t0)

    def _failed(self, status: str, parts: list, message: str, ended: bool = True) -> Reply:
        elapsed = self._elapsed()
        if self.box._slot[0] is self.proc:
            self.box._slot[0] = None
        self.box._busy = False
        if status == "died" and ended:  # let the keeper finish its report (why the runner ended)
            self.proc.wait_keeper(REAP_GRACE_S)
        self.proc.kill()
        why, output, size = self.proc.report()
        self.proc.shared.close()
        if status == "died" and ended:
            message += f" ({why or 'its keeper process was ' + (self.proc.reaped or 'lost')})"
        return Reply(status, parts, message + output_note(output, size), elapsed, output, size)

