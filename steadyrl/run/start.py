"""Starting a run: its config (a resumed run's own when none is given) and its directory.

The order is the user's: the run directory is locked from the first look at it (:func:`claim_run_dir`),
every input is checked (:func:`steadyrl.assembly.setup.check_inputs`), and only then is the directory
touched (:func:`prepare_run_dir`): a bad input under ``--overwrite`` or ``--resume`` leaves the old
run, and its ``config.yaml``, as it was. How a directory is named, locked, marked and checked is
in :mod:`.directory`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from .. import distributed as dist
from ..config import config_notes, load_config
from ..config.loading import read_yaml
from ..config.schema import Config
from ..errors import TrainingInterrupted
from ..rewards.loader import absolute_file_spec
from . import checkpoint as ckpt
from .directory import (LOCK, RunLock, check_output_dir, check_resume_matches, check_saved_config, on_main,
                        prepare_output_dir, resolve_output_dir, write_run_config)
from .report import resume_hint
from .trust import check_config_code, record_own_config, run_code


def load_run_config(path: str | None, overrides: list[str], *, output_dir: str | None, resume: bool,
                    trust_run_code: bool = False) -> Config:
    """The config of ``steadyrl train``: ``--resume`` with no config file continues with the run's
    own ``config.yaml`` (checked before it is read), plus ``overrides``. The code that config.yaml
    names runs only when it is recorded as this user's own, or with ``trust_run_code``
    (:func:`steadyrl.run.trust.check_config_code`: the rule of every command that reads a run)."""
    if resume and output_dir:  # before the saved config.yaml is read, used or rewritten
        check_saved_config(Path(output_dir))
    if path is None and resume and output_dir and (Path(output_dir) / "config.yaml").is_file():
        path = str(Path(output_dir) / "config.yaml")
        if os.environ.get("RANK", "0") == "0":  # before the process group exists: torchrun's rank
            print(f"resuming with the run's config {path}", flush=True)
    config = load_config(path, overrides)
    if resume and path and output_dir and Path(path).resolve() == (Path(output_dir) / "config.yaml").resolve():
        check_config_code(config, Path(path), trust_run_code, who=f"--resume --output-dir {output_dir!r}",
                          instead="or resume with a config of your own (steadyrl train CONFIG.yaml --resume "
                                  "--output-dir RUN)")
        code = run_code(config, read_yaml(Path(path)))  # the run's own code, run as when it started
        if code and os.environ.get("RANK", "0") == "0":
            print(f"the run's config loads {'; '.join(code)}", flush=True)
    return config


def claim_run_dir(config: Config, output_dir: str | None, resume: bool, overwrite: bool, lock: RunLock) -> Path:
    """The run directory, locked when a run was there before (a new one is locked when created),
    and checked against ``--resume`` / ``--overwrite``; nothing in it is touched yet."""
    fresh = not output_dir  # a new directory of its own: its name is claimed when created
    out = Path(dist.gather_objects(str(resolve_output_dir(config, output_dir)))[0])  # rank 0's time stamp
    ran_here = not fresh and (out / LOCK).is_file() and not (out / LOCK).is_symlink()
    if dist.gather_objects(ran_here)[0]:  # rank 0's view, so all ranks take the same branch
        on_main(lambda: lock.acquire(out))  # a run was here: still running? (else locked when created)
    if not fresh:
        check_output_dir(out, resume, overwrite)
    if resume and ckpt.latest_checkpoint(out / "checkpoints") is not None:
        check_resume_matches(config, out)
    return out


def prepare_run_dir(config: Config, out: Path, resume: bool, overwrite: bool, lock: RunLock, *,
                    fresh: bool) -> tuple[Path, Path | None]:
    """``(run directory, checkpoint to resume from or None)``: the directory created or cleared,
    a partial checkpoint removed, the resolved config written."""
    out = prepare_output_dir(out, resume, overwrite, lock, fresh=fresh)
    if dist.is_main():  # one rank repairs a shared directory; the others then see the result
        ckpt.clean_partial(out / "checkpoints")
    dist.barrier()
    latest = ckpt.latest_checkpoint(out / "checkpoints") if resume else None
    if dist.is_main():
        if resume and latest is None:
            print(f"--resume: no checkpoint in {out / 'checkpoints'}; starting at step 0", flush=True)
        written = write_run_config(_portable(config), out)
        # this user started it here: a --resume needs no flag. The bytes written, not read back
        # (a config.yaml swapped in meanwhile by someone who can write the directory is not recorded)
        record_own_config(out / "config.yaml", written)
        for note in config_notes(config):
            print(f"steadyrl: note: {note}", flush=True)
    return out, latest


def _portable(config: Config) -> Config:
    """The config as the run directory keeps it: reward files by absolute path, so that
    ``--resume`` and ``steadyrl eval --output-dir`` work from any directory."""
    rewards = [r.model_copy(update={"name": absolute_file_spec(r.name)}) for r in config.rewards]
    return config.model_copy(update={"rewards": rewards})


@contextmanager
def resume_hint_on_interrupt(config: Config, out: Path):
    """Ctrl-C becomes :class:`~steadyrl.errors.TrainingInterrupted` with the command that continues the run."""
    try:
        yield
    except KeyboardInterrupt:
        raise TrainingInterrupted(resume_hint(config, out)) from None
