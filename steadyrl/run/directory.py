"""The run directory: which one, whose it is, who is using it, and what ``--overwrite`` may remove.

* **Default name** ``runs/<preset>-<YYYYmmdd-HHMMSS>``, created with an exclusive ``mkdir``: a
  second run started in the same second gets ``...-2`` (then ``-3`` ...), never the first's.
* **Marker** ``.steadyrl-run`` (JSON, ``{"steadyrl_run": 1}``), written when a run starts in the
  directory. ``--overwrite`` removes the run files only of a directory that carries it: a folder
  that merely holds a ``config.yaml`` and a ``metrics.jsonl`` (another tool's, or a run of a
  version from before the marker) is not removed; the user deletes it, knowing what it is.
* **Lock** ``.steadyrl-lock``: rank 0 holds an exclusive lock on it for the whole run, with its
  PID written inside; a second ``steadyrl train`` on the directory stops at once (exit 2) naming
  the PID. A POSIX record lock (``fcntl.lockf``), not ``flock``: it belongs to the process, so
  the reward workers forked from the trainer do not inherit it, and the kernel drops it when
  the trainer dies, however it dies (``kill -9`` included, while an orphaned worker lingers).
* **Symlinks**: a run file or folder that is a symbolic link (``checkpoints -> ../other/...``)
  is refused: writing through it would change another run's files; so is a checkpoint
  ``checkpoints/step_N`` that is one (:func:`steadyrl.run.checkpoint.list_checkpoints`):
  resuming from it would load another directory's weights and state.
* **config.yaml** ends with a line ``# steadyrl-sha256: <hash of the text above>``, and the
  file is written atomically. ``--resume`` checks the saved file against it before using it or
  writing the new one: a cut or damaged file is refused, where it used to load with settings
  silently back at their defaults. The config the user resumes with may differ (overrides,
  a new file); that is checked key by key by :func:`check_resume_matches`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

from ..config import config_to_dict
from ..config.advice import user_written
from ..config.inert import marker_line
from ..config.loading import dump_config, get_dotted, read_yaml
from ..config.schema import Config
from ..errors import ConfigError
from ..files import atomic_write_text

try:
    import fcntl
except ImportError:  # Windows: no fcntl; runs are not locked there
    fcntl = None

MARKER, LOCK = ".steadyrl-run", ".steadyrl-lock"
MARKER_VERSION = 1
RUN_FILES = ("metrics.jsonl", "summary.json", "checkpoints")
"""Any of these means the directory already holds a run."""
OWNED = (*RUN_FILES, "samples.jsonl", "config.yaml", "warmstart", "tensorboard", "tracking.json", "dashboard.png",
         "final")
"""What ``--overwrite`` removes (and nothing else)."""
_HASH_LINE = re.compile(rb"\n# steadyrl-sha256: ([0-9a-f]{64})\b[^\n]*\n?\Z")


def resolve_output_dir(config: Config, output_dir: str | None) -> Path:
    if output_dir:
        return Path(output_dir)
    return Path("runs") / f"{config.algorithm.preset}-{time.strftime('%Y%m%d-%H%M%S')}"


def claim_new_dir(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3`` ... : the first that did not exist, created here
    (``mkdir`` without ``exist_ok`` is atomic: of two processes, one gets each name)."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ConfigError(f"no free run directory name after {base}-999: pass --output-dir")


def is_run_dir(path: Path) -> bool:
    """A steadyrl run directory: it carries steadyrl's marker (a plain file, not a link)."""
    return (path / MARKER).is_file() and not (path / MARKER).is_symlink()


def _symlinks(output_dir: Path) -> list[str]:
    return [name for name in (*OWNED, MARKER, LOCK, "report.md") if (output_dir / name).is_symlink()]


def check_output_dir(output_dir: Path, resume: bool, overwrite: bool) -> None:
    """Refuse to mix two runs in one directory unless told to resume or overwrite, to write
    through a symlink, and to overwrite what is not a run (changes nothing)."""
    if output_dir.exists() and not output_dir.is_dir():
        raise ConfigError(f"--output-dir {str(output_dir)!r} is a file, not a directory: choose a directory")
    if not output_dir.is_dir():
        return
    links = _symlinks(output_dir)
    if links:
        raise ConfigError(f"--output-dir {str(output_dir)!r}: {', '.join(links)} is a symbolic link; a run "
                          "writes and removes its own files only: replace the link by a directory of its own, "
                          "or choose another --output-dir")
    has_run = any((output_dir / name).exists() for name in RUN_FILES)
    if has_run and not (resume or overwrite):
        raise ConfigError(f"--output-dir {str(output_dir)!r} already holds a run: pass --resume to "
                          "continue it, --overwrite to replace it, or choose another directory")
    owned = [name for name in OWNED if (output_dir / name).exists()]
    if overwrite and owned and not is_run_dir(output_dir):
        raise ConfigError(f"--overwrite: {str(output_dir)!r} is not a steadyrl run directory (no {MARKER} file, "
                          f"which steadyrl writes in every run it starts), so its {', '.join(owned)} are not "
                          "removed; choose another --output-dir, or delete them yourself if they are an old run")


class RunLock:
    """An exclusive ``lockf`` on ``<run dir>/.steadyrl-lock``, held by rank 0 until :meth:`release`
    (per process: a second lock in the same process would succeed, so a process holds one)."""

    def __init__(self) -> None:
        self.fd: int | None = None

    def acquire(self, directory: Path) -> None:
        """Take the lock (once; a no-op on other ranks), or raise ConfigError naming the holder's PID."""
        from .. import distributed as dist  # torch: imported when a run starts, not by the checks before

        if self.fd is not None or fcntl is None or not dist.is_main():
            return
        path = directory / LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                         0o644)
        except OSError as exc:
            raise ConfigError(f"--output-dir {str(directory)!r}: cannot open the lock file {path}: "
                              f"{exc.strerror}") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):  # EAGAIN / EACCES: another process holds it
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise _in_use(directory, holder) from None
        except OSError as exc:  # a file system without locks (ENOLCK on some network ones): run unlocked
            os.close(fd)
            print(f"steadyrl: note: {path} cannot be locked ({exc.strerror}); nothing stops a second run "
                  "from using this directory at the same time", flush=True)
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            os.ftruncate(fd, 0)  # a run directory reads the same before and after a command
        finally:
            os.close(fd)  # closing the file drops the lock

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _remove(path: Path) -> None:
    try:
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigError(f"--overwrite: cannot remove {exc.filename or path}: {exc.strerror}; the old run is "
                          "partly removed: fix that and run the same command again") from None


def _in_use(directory: Path, holder: str) -> ConfigError:
    return ConfigError(f"--output-dir {str(directory)!r} is in use by another steadyrl run (PID {holder}); "
                       "two runs in one directory corrupt it: wait for that one to end, or choose "
                       "another --output-dir")


def probe_lock(directory: Path) -> None:
    """Raise :class:`ConfigError` naming the PID when another process holds ``directory``'s lock;
    take nothing (the lock, if free, is taken and dropped at once). For the checks made before
    torch is imported: the run takes the lock for real afterwards with :class:`RunLock`."""
    path = directory / LOCK
    if fcntl is None or not path.is_file() or path.is_symlink():
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return  # RunLock says why when the run takes it
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a shared lock: granted unless a run holds it
    except (BlockingIOError, PermissionError):
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
        raise _in_use(directory, holder) from None
    except OSError:
        pass  # a file system without locks: RunLock notes it
    finally:
        os.close(fd)  # drops the shared lock


def on_main(action) -> None:
    """Run ``action()`` on rank 0 only; a ConfigError there is raised on every rank, so no rank
    is left waiting at a barrier for a rank 0 that stopped (the lock is rank 0's)."""
    from .. import distributed as dist

    if not dist.is_initialized():
        action()
        return
    error = None
    if dist.is_main():
        try:
            action()
        except ConfigError as exc:
            error = str(exc)
    error = dist.gather_objects(error)[0]
    if error is not None:
        raise ConfigError(error)


def prepare_output_dir(output_dir: Path, resume: bool, overwrite: bool, lock: RunLock, *,
                       fresh: bool = False) -> Path:
    """Create (``fresh``: claim a new name for) the directory, lock it, clear the old run for
    ``--overwrite`` (every input has been checked by then) and mark it. Returns the directory."""
    from .. import distributed as dist

    if fresh:
        claimed = str(claim_new_dir(output_dir)) if dist.is_main() else None
        output_dir = Path(dist.gather_objects(claimed)[0])

    def claim() -> None:
        output_dir.mkdir(parents=True, exist_ok=True)
        lock.acquire(output_dir)
        check_output_dir(output_dir, resume, overwrite)  # again, now that no other run can change it
        if overwrite and not resume:
            for name in OWNED:
                _remove(output_dir / name)
        atomic_write_text(output_dir / MARKER, json.dumps({"steadyrl_run": MARKER_VERSION}) + "\n")

    on_main(claim)
    dist.barrier()
    output_dir.mkdir(parents=True, exist_ok=True)  # every rank: rank 0 has made it (a shared file system)
    return output_dir


def with_hash_line(text: str) -> str:
    """``text`` (YAML ending in a newline) followed by the line that records its hash."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{text}# steadyrl-sha256: {digest}  (of the text above; --resume refuses this file if it no longer matches)\n"


def write_run_config(config: Config, output_dir: Path) -> bytes:
    """``config.yaml``: the line naming the keys the user wrote (a ``--resume`` notes only those:
    :mod:`steadyrl.config.inert`), the config (secrets redacted), then the hash line, atomically.
    Returns the bytes written (what train records as the user's own: never read back)."""
    text = with_hash_line(marker_line(user_written(config)) + dump_config(config))
    atomic_write_text(output_dir / "config.yaml", text)
    return text.encode("utf-8")


def check_saved_config(output_dir: Path) -> None:
    """Refuse a run's ``config.yaml`` that is not the text steadyrl wrote (cut short by a full
    disk, damaged, edited by hand). A file without the hash line is accepted only in a run
    directory of a version before the marker."""
    path = output_dir / "config.yaml"
    if not path.is_file() or path.is_symlink():
        return
    data = path.read_bytes()
    match = _HASH_LINE.search(data)
    if match is None:
        if (output_dir / MARKER).is_file():
            raise ConfigError(f"the run's config {path} lacks its last line '# steadyrl-sha256: ...': the file was cut "
                              "short (a full disk?) or edited; restore it, or delete it and pass your config file "
                              "(a --resume then checks model and data against nothing)")
        return
    recorded, actual = match.group(1).decode(), hashlib.sha256(data[: match.start() + 1]).hexdigest()
    if actual != recorded:
        raise ConfigError(f"the run's config {path} has sha256 {actual}, but steadyrl wrote it with sha256 {recorded}: "
                          "it was damaged or edited since; restore it, or delete it and pass your config file "
                          "(a --resume then checks model and data against nothing)")


RESUME_KEYS = ("model.name_or_path", "model.gguf_file", "model.tokenizer", "model.revision", "model.critic_name_or_path",
               "model.lora", "data.train_path", "data.train_sources", "data.split", "data.prompt_key",
               "rollout.prompts_per_step")
"""What a checkpoint was built from: resuming with another value would load weights into another
model (a crash, or worse, none), or continue the data position in other prompts."""


def check_resume_matches(config: Config, output_dir: Path) -> None:
    """``--resume`` with settings the checkpoint cannot continue from is refused, naming the key."""
    saved_path = output_dir / "config.yaml"
    if not saved_path.is_file():
        return
    saved, now = read_yaml(saved_path), config_to_dict(config)
    from ..assembly.task import task_of

    keys = list(RESUME_KEYS) + list(task_of(config).resume_keys)  # the demo's: its settings too
    for key in keys:
        old, new = get_dotted(saved, key.split(".")), get_dotted(now, key.split("."))
        if old != new:
            raise ConfigError(f"--resume: {key} is {new!r}, but the run in {str(output_dir)!r} was trained with "
                              f"{old!r} ({saved_path}); resume with the same value, or start a new run "
                              "in another --output-dir")
    had_critic = get_dotted(saved, ["algorithm", "advantage_estimator"]) == "gae"
    if had_critic != (config.algorithm.advantage_estimator == "gae"):
        raise ConfigError(f"--resume: algorithm.advantage_estimator = {config.algorithm.advantage_estimator!r} "
                          f"{'has no' if had_critic else 'needs a'} critic, but the run in {str(output_dir)!r} "
                          f"was trained {'with' if had_critic else 'without'} one; resume with the same "
                          "algorithm.preset / advantage_estimator, or start a new run in another --output-dir")


def check_output_file(path: str, flag: str, config_path: str | None = None, *, allow: tuple[str, ...] = ()) -> None:
    """Refuse ``flag FILE`` (a file a command writes: ``eval --completions``, ``doctor --output``) before the
    work whose result it receives: a missing folder, a directory, a link (never written through), a steadyrl
    run directory's own record (its marker, config, metrics, samples, summary, report: the output would
    replace it; ``allow``: names of those it may replace), or the config file being read (``config_path``).
    A :class:`ConfigError` naming ``flag``."""
    target = Path(path)
    say = f"{flag} {path!r}"
    if target.is_symlink():
        raise ConfigError(f"{say} is a symbolic link: it is not written through (give a plain file's path)")
    if not target.resolve().parent.is_dir():
        raise ConfigError(f"{say}: its folder does not exist (give a file in an existing folder)")
    if target.is_dir():
        raise ConfigError(f"{say} is a directory: give the path of a file to write, e.g. "
                          f"{str(target / ('completions.jsonl' if flag == '--completions' else 'report.md'))!r}")
    if is_run_dir(target.resolve().parent) and target.name in {*OWNED, MARKER, LOCK, "report.md"} - set(allow):
        raise ConfigError(f"{say} is the run directory's own {target.name}: the output would replace it "
                          "(give another file name)")
    if config_path is not None and target.exists() and target.resolve() == Path(config_path).resolve():
        raise ConfigError(f"{say} is the config being read: the output would replace it")


def check_completions_path(completions_path: str, config_path: str | None = None) -> None:
    """``eval --completions FILE`` (written after the whole evaluation): :func:`check_output_file`."""
    check_output_file(completions_path, "--completions", config_path)
