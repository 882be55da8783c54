"""What contains a program of the ``code`` reward, for :mod:`steadyrl.sandbox.harness` (which
imports it as a top-level module: standard library only): becoming ``nobody``, the namespaces
(user, pid with its reaper, network, read-only mounts; a nested user namespace and an empty
``/proc`` per test), resource limits, finding and killing every process below the harness, and the
probe of what the kernel allows. See the harness's docstring for the whole picture.
"""

import ctypes
import json
import os
import resource
import signal
import sys
import time

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID = 0x10000000, 0x40000000, 0x00020000, 0x20000000
CLONE_NEWIPC = 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
NOBODY = 65534
LIBC = ctypes.CDLL(None, use_errno=True)


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _map_ids(uid, gid):
    try:
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError:
        pass


def _namespaces(job):
    """The harness's own user, pid and System V IPC namespaces (its shared memory, semaphores and
    message queues are its own, and die with the sample) (its later children are in the new pid namespace:
    they see no other process and can signal none), and, as asked, a network namespace with no
    interface up and a mount namespace where everything but the work directory is read-only - as
    far as the kernel lets an unprivileged process. Created once per sample, shared by its tests."""
    want = (CLONE_NEWNET if job["network"] else 0) | (CLONE_NEWNS if job["readonly_fs"] else 0)
    uid, gid = os.getuid(), os.getgid()
    if LIBC.unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWIPC | want) != 0:
        return {"network": False, "readonly_fs": False, "pid": False, "ipc": False}
    _map_ids(uid, gid)
    return {"network": bool(want & CLONE_NEWNET), "pid": True, "ipc": True,
            "readonly_fs": bool(want & CLONE_NEWNS) and _readonly(job["workdir"], hide=not job.get("view"),
                                                                  shm_bytes=job["file_size_mb"] << 20)}


def _seal(isolation):
    """In a test's child: ``/proc`` hidden (a mount namespace of its own), then a nested user
    namespace, so the program holds no capability over the namespaces above (it cannot remount
    the file system writable or bring the network up)."""
    if not isolation["pid"]:
        return
    if isolation["readonly_fs"]:
        if LIBC.unshare(CLONE_NEWNS) != 0 or LIBC.mount(
                b"none", b"/proc", b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k") != 0:
            raise OSError("cannot hide /proc")
    uid, gid = os.getuid(), os.getgid()
    if LIBC.unshare(CLONE_NEWUSER) != 0:
        raise OSError("cannot enter a nested user namespace")
    _map_ids(uid, gid)


def _start_init():
    """The first process of the pid namespace: it reaps orphans there, and when it is killed the
    kernel kills every process of the namespace."""
    pid = os.fork()
    if pid:
        return pid
    try:  # never returns into the caller
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.closerange(0, 65536)
        while True:
            try:
                os.wait()
            except ChildProcessError:
                time.sleep(0.05)
    finally:
        os._exit(0)


HIDDEN = ("/tmp", "/var/tmp", "/run", "/home", "/root", "/mnt", "/media", "/srv")
"""Covered by an empty tmpfs in the fallback's mount namespace (sockets, other users' files, data;
``/dev/shm`` is covered by a writable one of the sample's own, :func:`_own_shm`); the folders the interpreter and this harness live in, and the sample's own, are bound back on top."""


def _needed():
    """The folders the program's interpreter and this harness need, top-most only."""
    paths = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(os.__file__),
                                                  os.path.dirname(sys.executable),
                                                  os.path.dirname(os.path.abspath(__file__)))}, key=len)
    top = []
    for path in paths:
        if os.path.isdir(path) and not any(path == t or path.startswith(t + "/") for t in top):
            top.append(path)
    return top


def _hide(keep):
    """Cover each of :data:`HIDDEN` with an empty tmpfs, then bind ``keep`` (the sample's folder) and
    the folders of :func:`_needed` under it back at their own paths (opened before, so the covered
    originals are what is bound)."""
    back = [keep] + [p for p in _needed() if p != keep]
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in back}
    try:
        for path in HIDDEN:
            inside = path + "/"
            if os.path.islink(path) or not os.path.isdir(path) or any(p == path for p in back):
                continue
            if LIBC.mount(b"none", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=64k,mode=755") != 0:
                return False
            for p in back:
                if p.startswith(inside):
                    os.makedirs(p, exist_ok=True)
                    if LIBC.mount(f"/proc/self/fd/{fds[p]}".encode(), p.encode(), None, MS_BIND | MS_REC, None) != 0:
                        return False
    finally:
        for fd in fds.values():
            os.close(fd)
    return True


SHM = "/dev/shm"
"""Left writable: a fresh tmpfs of the sample's own (multiprocessing's locks, queues and pools need it)."""


def _own_shm(size):
    """A fresh, empty, writable ``/dev/shm`` of at most ``size`` bytes (the host's is covered)."""
    if not os.path.isdir(SHM) or os.path.islink(SHM):
        return True
    opts = f"size={max(int(size), 1 << 20)},mode=1777".encode()
    return LIBC.mount(b"none", SHM.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) == 0


def _readonly(workdir, hide=True, shm_bytes=1 << 20):
    """Every mount read-only except ``workdir`` (bound onto itself) and a fresh ``/dev/shm``
    (:func:`_own_shm`), and, with ``hide`` (outside bubblewrap's view, which has nothing to hide),
    :data:`HIDDEN` covered; ``False`` if any step failed."""
    if LIBC.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    if hide and not _hide(os.path.dirname(workdir)):
        return False
    if not _own_shm(shm_bytes):
        return False
    if LIBC.mount(workdir.encode(), workdir.encode(), None, MS_BIND | MS_REC, None) != 0:
        return False
    ok = True
    with open("/proc/self/mountinfo") as f:
        mounts = [(line.split()[4], line.split()[5]) for line in f]
    for point, opts in mounts:
        if point in (workdir, SHM) or not os.path.exists(point):  # not there any more: under a covered folder
            continue
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        for name, bit in (("nosuid", MS_NOSUID), ("nodev", MS_NODEV), ("noexec", MS_NOEXEC)):
            flags |= bit if name in opts.split(",") else 0
        if LIBC.mount(b"none", point.encode(), None, flags, None) != 0 and "ro" not in opts.split(","):
            ok = False
    return ok


def _world_readable(path):
    """Whether a user other than the owner can read ``path`` (every directory above it searchable)."""
    path = os.path.realpath(path)
    while True:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return False
        if not mode & 0o001:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def _become_nobody():
    """setuid ``nobody``; dumpable again, else ``/proc/self/uid_map`` stays root's and no user
    namespace can be mapped."""
    os.setgroups([]), os.setgid(NOBODY), os.setuid(NOBODY)
    LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)


def _enter_view(job):
    """In bubblewrap's view (:mod:`steadyrl.sandbox.view`): ``nobody`` at once when started as root
    (bwrap left only the rights to do so), then the work directory in the view's own tmpfs."""
    if not job.get("view"):
        return
    if os.getuid() == 0:
        _become_nobody()
    os.makedirs(job["workdir"], exist_ok=True)


def _as_nobody():
    """Run the program as ``nobody``: when this is root and the interpreter's library is readable to others."""
    return os.getuid() == 0 and _world_readable(os.path.dirname(os.__file__))


def _tasks_of(uid):
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return count


def _limit(kind, value):
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        pass


def _below():
    """Every process below this one (its children, theirs, orphans re-parented here or to the pid
    namespace's first process)."""
    found, stack = [], [os.getpid()]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            kids = []
        found += kids
        stack += kids
    return found


def _kill_below(keep=None):
    """SIGKILL every process below this one but ``keep``, round after round until none is left."""
    for _ in range(50):
        found = [pid for pid in _below() if pid != keep]
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        time.sleep(0.001)


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _nproc(job):
    uid = NOBODY if _as_nobody() else os.getuid()
    return _tasks_of(uid) + job["processes"] + job.get("threads", 0)


def _probe_child(job, r, w):
    """The probe's child: what it got, as JSON on ``w``."""
    os.close(r)
    got = {"network": False, "readonly_fs": False, "pid": False, "ipc": False}
    try:
        user = "nobody" if _as_nobody() or (job.get("view") and os.getuid() == 0) else "same"
        _enter_view(job)
        if _as_nobody():
            os.chmod(os.path.dirname(job["workdir"]), 0o711)
            os.chown(job["workdir"], NOBODY, NOBODY)
            _become_nobody()
        got = _namespaces(job)
        if got["pid"]:
            init = _start_init()  # the pid namespace needs its first process before any other
            kid = os.fork()
            if kid == 0:
                try:
                    _seal(got)
                    os._exit(0 if os.path.exists("/proc/self") != got["readonly_fs"] else 1)
                except BaseException:  # noqa: BLE001
                    os._exit(1)
            if os.waitstatus_to_exitcode(os.waitpid(kid, 0)[1]) != 0:
                got = {"network": False, "readonly_fs": False, "pid": False, "ipc": False}
            # killed here: its parent-death signal can come too early (before its prctl) or
            # never, and a reaper left behind would outlive the trainer
            os.kill(init, signal.SIGKILL)
            os.waitpid(init, 0)
    except BaseException:  # noqa: BLE001
        user = "unknown"
    os.write(w, json.dumps({**got, "user": user}).encode())


def _probe(job):
    """What a program gets: the same steps in a throw-away child, down to a sealed grandchild
    (asked once, when the reward is built)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:  # never returns into the caller (a failed write included)
            _probe_child(job, r, w)
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    try:
        return json.loads(data)
    except ValueError:
        return {"network": False, "readonly_fs": False, "pid": False, "ipc": False, "user": "unknown"}
