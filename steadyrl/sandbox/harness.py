"""The per-sample harness of the ``code`` reward: a script run as ``python -I harness.py`` (standard
library only, never imported by steadyrl), inside bubblewrap's view (:mod:`steadyrl.sandbox.view`)
where there is one, that runs one program against its test cases.

It reads one JSON job on stdin and writes one JSON reply on stdout::

    job   = {"source": str, "mode": "stdio" | "calls", "cases": [...], "setup": str,
             "workdir": str, "view": bool, "test_time_s": float, "sample_time_s": float,
             "memory_mb": int, "processes": int, "file_size_mb": int, "open_files": int,
             "output_bytes": int, "network": bool, "readonly_fs": bool, "threads": int,
             "preload": [module names], "verdict": bool}
    reply = {"results": [{"status": "ok" | <reason>, "stdout": str, "value": ..., "error": str,
                          "verdict": str}, ...]}

``verdict`` (``stdio`` only; a trusted scorer script as the program, :mod:`steadyrl.rewards.contained`):
each test's child also gets a pipe on fd 3, read into the result's ``verdict``, the score's channel.
The script closes it in every fork that runs model-written text, so nothing the sample prints or
writes reaches it (:mod:`steadyrl.rewards.contained_verdict`).

``preload`` names installed modules (a third-party scorer's package: never the program's text) the
harness imports once, contained, before the first test's fork, so each test starts with them
loaded and leaves nothing behind for the next. ``stdio`` cases are stdin texts; ``calls`` cases are calls of the program's functions or
``assert`` statements (:mod:`harness_calls`). Once per sample the harness (in the view: first
becomes ``nobody`` when started as root, and makes its work directory in the view's tmpfs) writes
the inputs, then (outside a view, as root, when the interpreter's files are readable by others)
becomes ``nobody`` - so ``RLIMIT_NPROC`` holds and the trainer's files are out of reach - and enters
new user, pid, IPC and, as asked, network (no interface up) and mount namespaces (every mount
read-only except the work directory and a fresh ``/dev/shm``), where the kernel lets an unprivileged process; the first
process of the pid namespace is a small reaper (``_start_init``).

The program runs in a child forked per test (``stdio``: stdin is the case's input) or in one child
for all ``calls`` cases, which answers one request at a time (a case written on its fd 4, the reply
read from its fd 3): the harness keeps each case's clock from its request, so nothing the program
writes can reset it. The child, before a line of the program runs: its own process group; in the
pid namespace (it sees no process outside, ``getppid()`` is 0, it can signal none); ``/proc``
covered by an empty read-only tmpfs in a mount namespace of its own; a nested user namespace (no
capability over the namespaces above: it cannot remount the file system writable or bring the
network up); ``RLIMIT_AS`` / ``CPU`` / ``NPROC`` / ``FSIZE`` / ``NOFILE``; cwd the work directory;
(the kernel counts threads as tasks: ``RLIMIT_NPROC`` is ``processes + threads``, and the harness
itself holds processes to ``processes`` by counting them)
descriptors above 2 (4 for ``calls``) closed.

The harness is a child subreaper and counts the processes below it every 50 ms: at a test's time
limit, past its process or output limit, and when the test's child ends, the child's group and
every process below the harness (but the reaper) are killed; at the end the reaper too, and with
it the whole pid namespace. The expected outputs never reach this process: the program's stdout
and returned values are compared by the reward.

``{"probe": true, "workdir": ..., "network": true, "readonly_fs": true, "view": bool}`` instead
answers what a program would get: ``{"network": bool, "readonly_fs": bool, "pid": bool, "ipc":
bool, "user": "nobody" | "same"}``.
"""

import json
import os
import resource
import select
import signal
import sys
import time

# the containment half of the harness, found next to this file (then out of the programs' sys.path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_os import (  # noqa: E402
    LIBC, NOBODY, PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, _as_nobody, _become_nobody, _below, _enter_view,
    _kill_below,
    _limit, _namespaces, _nproc, _probe, _seal, _start_init,
)
from harness_calls import run_program  # noqa: E402

del sys.path[0]
STDERR_KEEP = 2048


PRELOAD = ("math", "collections", "heapq", "itertools", "bisect", "functools", "re", "string", "random",
           "fractions", "decimal", "statistics", "copy", "operator", "array", "datetime", "typing", "io")
"""Imported before the fork, so a program's common imports are free (and work as ``nobody``)."""


def _preload():
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass


def _enter_child(job, isolation, stdin_fd, out_fd, err_fd, pipes, nproc, cpu_s):
    """In the forked child, before the program: everything the module docstring lists."""
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.setpgid(0, 0)
    os.dup2(stdin_fd, 0), os.dup2(out_fd, 1), os.dup2(err_fd, 2)
    if pipes is not None:  # replies (calls) or the verdict (stdio with ``verdict``) on 3, requests (calls) on 4
        report = os.dup(pipes[0])
        request = os.dup(pipes[1]) if pipes[1] is not None else None
        os.dup2(report, 3)
        if request is not None:
            os.dup2(request, 4)
    os.closerange(3 if pipes is None else 4 if pipes[1] is None else 5, 65536)
    _seal(isolation)
    os.chdir(job["workdir"])
    mb = 1024 * 1024
    _limit(resource.RLIMIT_AS, job["memory_mb"] * mb)
    _limit(resource.RLIMIT_CPU, cpu_s)
    _limit(resource.RLIMIT_NPROC, nproc)
    _limit(resource.RLIMIT_FSIZE, job["file_size_mb"] * mb)
    _limit(resource.RLIMIT_NOFILE, job["open_files"])
    sys.stdin = open(0, "r", closefd=False, errors="replace")
    sys.stdout = open(1, "w", closefd=False, errors="replace")
    sys.stderr = open(2, "w", closefd=False, errors="replace")
    sys.argv = ["solution.py"]


class _Child:
    """One forked child running the program, what it printed, and (``calls``) the reply lines it
    sent on fd 3 and the requests still to be written to its fd 4."""

    def __init__(self, job, isolation, stdin_path, calls, nproc, cpu_s):
        self.cap = job["output_bytes"]
        stdin_fd = os.open(stdin_path, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        verdict = not calls and bool(job.get("verdict"))
        rep_r, rep_w = os.pipe() if calls or verdict else (None, None)
        req_r, req_w = os.pipe() if calls else (None, None)
        self.pid = os.fork()
        if self.pid == 0:  # the child never returns into the harness's loop, whatever the program does
            code = 121
            try:
                _enter_child(job, isolation, stdin_fd, out_w, err_w,
                             (rep_w, req_r) if calls or verdict else None, nproc, cpu_s)
                code = 1
                run_program(job)
            finally:
                os._exit(code)
        for fd in (stdin_fd, out_w, err_w, rep_w, req_r):
            if fd is not None:
                os.close(fd)
        if req_w is not None:
            os.set_blocking(req_w, False)
        self.fds = {out_r: b"", err_r: b"", **({rep_r: b""} if rep_r is not None else {})}
        self.out, self.err, self.rep, self.req = out_r, err_r, rep_r, req_w
        self.pending, self.replies, self.parsed = b"", [], 0
        self.status, self.over, self.too_many = None, False, False

    def send(self, message):
        """Queue one request line for the child (written as its pipe takes it)."""
        self.pending += (json.dumps(message) + "\n").encode()

    def pump(self, wait_s):
        """Read what the pipes hold and write what is pending (waiting up to ``wait_s``); reap the
        child when it ends."""
        open_fds = [fd for fd in self.fds if fd >= 0]
        writing = [self.req] if self.pending and self.req is not None else []
        if open_fds or writing:
            ready, can_write, _ = select.select(open_fds, writing, [], max(0.0, wait_s))
            if can_write:
                try:
                    self.pending = self.pending[os.write(self.req, self.pending[:1 << 16]):]
                except (BlockingIOError, BrokenPipeError):
                    pass
            for fd in ready:
                data = os.read(fd, 1 << 16)
                if not data:
                    self.fds[-1 - fd] = self.fds.pop(fd)  # closed: kept under a negative key
                    continue
                self.fds[fd] += data
                if fd == self.err and len(self.fds[fd]) > STDERR_KEEP:
                    self.fds[fd] = self.fds[fd][-STDERR_KEEP:]
                if fd == self.out and len(self.fds[fd]) > self.cap:
                    self.over = True
                if fd == self.rep and len(self.fds[fd]) - self.parsed > self.cap + (1 << 16):
                    self.over = True  # replies (returned values) count like printed output
        elif wait_s > 0:
            time.sleep(min(wait_s, 0.001))
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status

    def text(self, fd):
        return (self.fds.get(fd) or self.fds.get(-1 - fd) or b"").decode("utf-8", "replace")

    def reply(self):
        """The next complete reply line (a dict), or ``None``; lines that are not JSON objects are
        skipped, and those read are dropped from the buffer."""
        key = self.rep if self.rep in self.fds else -1 - self.rep
        data = self.fds.get(key, b"")
        while True:
            end = data.find(b"\n", self.parsed)
            if end < 0:
                if self.parsed:
                    self.fds[key], self.parsed = data[self.parsed:], 0
                return None
            line, self.parsed = data[self.parsed:end], end + 1
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                return message

    def kill(self, keep=None):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        _kill_below(keep)
        if self.status is None:
            try:
                self.status = os.waitpid(self.pid, 0)[1]
            except ChildProcessError:
                self.status = 0
        if self.req is not None:
            os.close(self.req)
            self.req, self.pending = None, b""
        until = time.monotonic() + 1.0  # every writer is dead: the pipes end at once
        while any(fd >= 0 for fd in self.fds) and time.monotonic() < until:
            self.pump(0.01)
        for fd in list(self.fds):
            try:
                os.close(fd if fd >= 0 else -1 - fd)
            except OSError:
                pass


def _why(child, timed_out):
    """The failure reason of a child that did not end cleanly; ``None`` when it exited 0."""
    err = child.text(child.err)
    if child.over:
        return "output_limit"
    if child.too_many:
        return "processes"
    if timed_out:
        return "timeout"
    code = os.waitstatus_to_exitcode(child.status)
    if code == -signal.SIGXCPU:
        return "timeout"
    if code == 120 or "MemoryError" in err:
        return "memory"
    if code == 121:
        return "sandbox_error"
    if "RecursionError" in err:
        return "runtime_error"
    if code < 0:
        return "crashed"
    return None if code == 0 else "runtime_error"


def _watch(ctx, child, started, until=None):
    """Pump ``child`` until ``until(child)`` is true (``calls``: a reply came), it ends, or a limit
    is hit; ``"done"``, ``"ended"``, ``"timeout"``, ``"output"`` or ``"processes"``. The clock of
    the test (``started``) is the harness's own: nothing the program writes moves it."""
    job, init = ctx["job"], ctx["init"]
    next_count = 0.0
    while True:
        if until is not None and until(child):
            return "done"
        if child.status is not None:
            return "ended"
        now = time.monotonic()
        if now >= next_count:  # RLIMIT_NPROC does not hold for root: count them here too
            next_count = now + 0.05
            if len([p for p in _below() if p != init]) > job["processes"]:
                child.too_many = True
                return "processes"
        limit = min(ctx["deadline"], started + job["test_time_s"])
        if child.over:
            return "output"
        if now >= limit:
            return "timeout"
        child.pump(min(0.05, max(0.0, limit - now)))


def _cpu_s(job):
    cases = len(job["cases"]) if job["mode"] != "stdio" else 1
    return int(job["test_time_s"] * (cases + 1)) + 1


def _stdio(ctx):
    results = []
    for path in ctx["inputs"]:
        if time.monotonic() >= ctx["deadline"]:
            results.append({"status": "timeout", "error": "the sample's time limit was spent"})
            continue
        child = _Child(ctx["job"], ctx["isolation"], path, False, ctx["nproc"], _cpu_s(ctx["job"]))
        end = _watch(ctx, child, time.monotonic())
        child.kill(keep=ctx["init"])
        why = _why(child, end == "timeout")
        results.append({"status": why or "ok", "stdout": "" if why else child.text(child.out),
                        "error": child.text(child.err)[-500:],
                        **({"verdict": "" if why else child.text(child.rep)} if child.rep is not None else {})})
    return results


def _calls(ctx):
    """One child for all cases: it loads the program and says ``ready`` within a test's time, then
    answers each case within a test's time of the harness's request (:mod:`harness_calls`)."""
    job = ctx["job"]
    child = _Child(job, ctx["isolation"], os.devnull, True, ctx["nproc"], _cpu_s(job))
    got = {}

    def wait_for(key, value):
        def arrived(c):
            while True:
                message = c.reply()
                if message is None:
                    return False
                if message.get(key) == value:
                    got[key] = message
                    return True
        return arrived

    results, end = [], _watch(ctx, child, time.monotonic(), wait_for("ready", True))
    for i, case in enumerate(job["cases"]):
        if end != "done":
            break
        child.send({**case, "case": i})
        end = _watch(ctx, child, time.monotonic(), wait_for("case", i))
        if end == "done":
            reply = got["case"]
            results.append({k: reply[k] for k in ("status", "value", "error") if k in reply})
    child.kill(keep=ctx["init"])
    why = _why(child, end == "timeout") or "runtime_error"
    err = child.text(child.err)[-500:]
    if child.over:  # past the output cap: no case counts
        results = []
    results += [{"status": why, "error": err or "the program ended before this case"}] * (len(job["cases"]) - len(results))
    return results


def _prepare(job):
    """Files and ownership for the program (while still the caller's user), then drop to
    ``nobody`` where that applies, then the namespaces; the context of the tests."""
    _enter_view(job)
    base = os.path.dirname(job["workdir"])
    inputs = []
    if job["mode"] == "stdio":
        for i, text in enumerate(job["cases"]):
            inputs.append(os.path.join(base, f"in_{i}"))
            with open(inputs[-1], "w") as f:
                f.write(text)
            os.chmod(inputs[-1], 0o644)
    nproc = _nproc(job)
    if _as_nobody():  # the program runs as nobody: its work directory must be its own
        os.chmod(base, 0o711)
        os.chown(job["workdir"], NOBODY, NOBODY)
        _become_nobody()
    isolation = _namespaces(job)
    if isolation["pid"]:  # RLIMIT_NPROC counts the tasks of the user in the program's own user namespace
        nproc = job["processes"] + job.get("threads", 0) + 1
    init = _start_init() if isolation["pid"] else None
    return {"job": job, "isolation": isolation, "init": init, "nproc": nproc, "inputs": inputs,
            "deadline": time.monotonic() + job["sample_time_s"]}


def main():
    job = json.loads(sys.stdin.read())
    if job.get("probe"):
        sys.stdout.write(json.dumps(_probe(job)))
        return
    LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _preload()
    ctx = _prepare(job)
    if job.get("preload"):
        os.chdir(job["workdir"])  # where a package's import may write (tempfile's last resort)
    for name in job.get("preload", ()):  # trusted modules the caller names, shared by every test's fork
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - the program's own import says what is wrong
            pass
    try:
        results = (_stdio if job["mode"] == "stdio" else _calls)(ctx)
    finally:
        _kill_below()
    sys.stdout.write(json.dumps({"results": results}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
