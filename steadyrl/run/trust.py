"""What code a run directory's ``config.yaml`` makes steadyrl run, and eval's check of it.

A run directory is not only data: its saved config names reward functions by file or module
(``rewards/my.py:score`` is executed when loaded), tools, a tool-call parser or an environment
the same way (``rollout.multi_turn.tools``, ``rollout.multi_turn.tool_parser``, ``rollout.multi_turn.environment``,
``rollout.multi_turn.agent``), and may set
``model.trust_remote_code`` or ``teacher.trust_remote_code`` (the model's or the teacher's own Python
files are executed when it loads). The
built-in rewards' options can do as much (:func:`option_findings`): ``trust_remote_code`` at any
depth (``reward_model`` imports the reward model's files), ``python`` (the ``code`` reward runs
that interpreter when it is built), a sandbox loosened (``no_network: false``,
``readonly_fs: false``); and they can reach out: ``api_key_env``, ``{env: NAME}`` and
``env_passthrough`` name the evaluator's own environment variables (their values would go to
whatever the config names), ``url`` / ``base_url`` or any ``http(s)://`` value names a server.

**The one rule** (:func:`check_config_code`, docs/rewards.md "Whose code runs"): a config steadyrl
*reads* rather than one you hand it to run - a run directory's ``config.yaml`` (``eval --output-dir
RUN``, ``train --resume --output-dir RUN`` without a config, ``export RUN``) or the file ``doctor
CONFIG.yaml`` examines - may be someone else's, marker or not (``.steadyrl-run`` is a file its author
writes): the code it names (:func:`run_code`) is refused unless ``--trust-run-code`` is given, or the
config is this user's own on this machine (:func:`is_own_config`). A config is recorded as one's own
when ``steadyrl train`` writes it into its run directory (:func:`record_own_config`): a record in
the user's state directory (``$STEADYRL_TRUST_DIR``, else ``$XDG_STATE_HOME/steadyrl/trusted-configs``,
else ``~/.local/state/steadyrl/trusted-configs``), a file named by the SHA-256 of the bytes train
wrote, owned by the user and writable by no one else, in a store no one else can write. Those
bytes name only code the user already chose to run, so a copy or a move of one's own run stays
one's own (reward files are kept by absolute path; a tool, parser, environment or agent given by a
relative path is found from the current directory, as it always is); a config.yaml changed since,
or any other, has no record, and nothing in a run directory can make one (train records the bytes
it wrote, never what the path holds after). The bytes judged are those the config was loaded
from (one read, kept on the config): a config.yaml swapped between its load and its check is
judged by what was loaded. ``model.trust_remote_code`` names no
file: it imports the model's files from the run's checkpoints, so for it the record holds only in a
directory of this user's that no one else can write (a copy of one's config beside someone else's
checkpoint is not one's run).
``config show`` and ``plot`` run nothing a config names (without the flag), so they need none.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any, Iterator

from ..config.loading import get_dotted, read_yaml_source
from ..config.renamed import renamed_copy
from ..config.schema import Config
from ..errors import ConfigError
from ..rewards import BUILTIN_REWARDS
from ..secrets import is_env_reference

__all__ = ["BUILTIN_TOOLS", "CODE_OPTIONS", "ENDPOINT_OPTIONS", "SECRET_OPTIONS", "TRUST_DIR_VAR", "option_findings",
           "run_code", "check_run_code", "check_config_code", "is_own_config", "record_own_config"]

TRUST_DIR_VAR = "STEADYRL_TRUST_DIR"
"""Where this user's records of their own run configs are kept (module docstring)."""
MODEL_CODE = "the model's own Python files (model.trust_remote_code = true)"
TEACHER_CODE = "the teacher's own Python files (teacher.trust_remote_code = true)"

BUILTIN_TOOLS = frozenset({"steadyrl.demo.calculator:calculate"})
"""Tools that are steadyrl's own code (the tool demo's calculator): naming them runs nothing new."""

BUILTIN_ENVIRONMENTS = ("textarena:",)
"""``rollout.multi_turn.environment`` adapters whose games are an installed package's code (docs/environments.md):
naming one runs nothing the evaluator did not install. ``openenv:`` names a server, so it counts."""

CODE_OPTIONS = {
    "trust_remote_code": "imports the model's own Python files",
    "python": "runs that interpreter",
}
"""Built-in reward options that name code to run (any value but null / false), at any depth."""

SANDBOX_OPTIONS = {"no_network": (False,), "readonly_fs": (False,), "sandbox": ("namespaces",)}
"""Options of the ``code`` reward, and the values of each that loosen the sandbox the programs run
in (``sandbox: namespaces`` gives up bubblewrap's file-system view where it is installed)."""

ENDPOINT_OPTIONS = ("url", "base_url")
"""Options that name a server the reward sends samples (and any key) to."""

SECRET_OPTIONS = ("api_key_env",)
"""Options that name one of the evaluator's environment variables, sent as a key."""


def _walk(data: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """``(path, key, value)`` of every mapping entry and list item in ``data``, at any depth."""
    if isinstance(data, dict):
        for key, value in data.items():
            where = f"{path}.{key}"
            yield where, key, value
            yield from _walk(value, where)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield f"{path}[{i}]", None, value
            yield from _walk(value, f"{path}[{i}]")


def option_findings(options: dict, where: str) -> list[str]:
    """What a built-in reward's ``options`` would run or reach (see the module docstring)."""
    found = []
    for path, key, value in _walk(options, where):
        if is_env_reference(value):
            found.append(f"{path} = {{env: {value['env']}}} (reads the environment variable {value['env']})")
        elif key in CODE_OPTIONS and value not in (None, False):
            found.append(f"{path} = {value!r} ({CODE_OPTIONS[key]})")
        elif key in SANDBOX_OPTIONS and any(value is v or value == v for v in SANDBOX_OPTIONS[key]
                                            if not isinstance(v, bool) or isinstance(value, bool)):
            found.append(f"{path} = {value!r} (loosens the sandbox of the programs it runs)")
        elif key in SECRET_OPTIONS and value is not None:
            found.append(f"{path} = {value!r} (sends the environment variable {value} as a key)")
        elif key in ENDPOINT_OPTIONS and value is not None or \
                isinstance(value, str) and value.strip().lower().startswith(("http://", "https://")):
            found.append(f"{path} = {value!r} (a server the samples are sent to)")
    return found


def _saved_reward(saved_rewards: list, i: int, name: str) -> dict | None:
    entry = saved_rewards[i] if i < len(saved_rewards) else None
    return entry if isinstance(entry, dict) and entry.get("name") == name else None


def _reward_code(config: Config, saved: dict) -> list[str]:
    """User reward specs, and what built-in rewards' options run or reach, as the saved config has them."""
    saved_rewards = get_dotted(saved, ["rewards"]) or []
    saved_rewards = saved_rewards if isinstance(saved_rewards, list) else []
    saved_names = {r.get("name") for r in saved_rewards if isinstance(r, dict)}
    code = []
    for i, r in enumerate(config.rewards):
        if r.name not in BUILTIN_REWARDS:
            if r.name in saved_names:
                code.append(f"reward {r.name!r}")
            continue
        entry = _saved_reward(saved_rewards, i, r.name)
        if entry is None:
            continue  # a reward the command line added is the user's own choice
        where = f"rewards[{i}] ({r.name})"
        ours = set(option_findings(r.options, f"{where}.options"))
        code += [f for f in option_findings(entry.get("options") or {}, f"{where}.options") if f in ours]
        passed = [e for e in r.env_passthrough if e in (entry.get("env_passthrough") or [])]
        if passed:
            code.append(f"{where}.env_passthrough = {passed} (keeps the evaluator's environment variables)")
    return code


def run_code(config: Config, saved: dict) -> list[str]:
    """The code ``config`` loads, and the secrets and servers it reaches, that came from the saved
    config ``saved`` (a key the command line set is the user's own choice): user reward specs and
    built-in reward options (:func:`option_findings`), tools, a tool parser or an environment, and
    ``model.trust_remote_code`` / ``teacher.trust_remote_code``."""
    saved = renamed_copy(saved)  # a config saved before a rename names its code under the old keys
    code = _reward_code(config, saved)
    mt = config.rollout.multi_turn
    saved_tools = get_dotted(saved, ["rollout", "multi_turn", "tools"]) or []
    code += [f"tool {t!r}" for t in mt.tools if t in saved_tools and t not in BUILTIN_TOOLS]
    if mt.environment is not None and mt.environment == get_dotted(saved, ["rollout", "multi_turn", "environment"]):
        if mt.environment.startswith("openenv:"):  # a server the policy's turns are sent to
            code.append(f"environment {mt.environment!r} (a server the episodes are sent to)")
        elif not mt.environment.startswith(BUILTIN_ENVIRONMENTS):  # an installed package's games run no new code
            code.append(f"environment {mt.environment!r}")
    if mt.agent is not None and mt.agent == get_dotted(saved, ["rollout", "multi_turn", "agent"]):
        code.append(f"agent {mt.agent!r}")
    if ":" in mt.tool_parser and mt.tool_parser == get_dotted(saved, ["rollout", "multi_turn", "tool_parser"]):
        code.append(f"tool parser {mt.tool_parser!r}")
    if config.model.trust_remote_code and get_dotted(saved, ["model", "trust_remote_code"]) not in (None, False):
        code.append(MODEL_CODE)
    if config.teacher.name_or_path is not None and config.teacher.trust_remote_code and \
            get_dotted(saved, ["teacher", "trust_remote_code"]) not in (None, False):
        code.append(TEACHER_CODE)  # the teacher is loaded as the policy is, its own files with it
    return code


def _store() -> Path:
    if os.environ.get(TRUST_DIR_VAR):
        return Path(os.environ[TRUST_DIR_VAR])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "steadyrl" / "trusted-configs"


def _record_path(config_path: Path) -> Path:
    return _store() / hashlib.sha256(Path(config_path).read_bytes()).hexdigest()


def _is_recorded(digest: str) -> bool:
    """Whether this user recorded bytes of SHA-256 ``digest`` as their own: the record a regular
    file of theirs that no one else can write, in a store no one else can write (a record's name
    says which bytes it vouches for: in a store others write, they rename the user's records)."""
    try:
        info = (_store() / digest).lstat()
        store = _store().stat()
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022 and \
        store.st_uid == os.getuid() and not store.st_mode & 0o022


def _only_mine(folder: Path) -> bool:
    """Whether ``folder`` (followed, as a command reads it) is this user's and no one else can write it."""
    try:
        info = folder.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def _as_loaded(config: Config, config_path: Path) -> tuple[str, dict]:
    """``(SHA-256, mapping)`` of the bytes ``config`` was built from when it was loaded from
    ``config_path`` (one read, kept by :func:`~steadyrl.config.loading.load_config`), else of one
    read of ``config_path`` now: hashed and read as one, never a file swapped between the two."""
    source = getattr(config, "_source", None)
    if source is not None and os.path.abspath(source[0]) == os.path.abspath(config_path):
        return source[1], source[2]
    saved, _, digest = read_yaml_source(config_path)
    return digest, saved


def record_own_config(config_path: Path, written: bytes | None = None) -> None:
    """Remember ``written`` (the bytes ``steadyrl train`` wrote to ``config_path``; without it, the
    file's bytes now) as this user's own; a store that cannot be written is skipped (the run then
    needs ``--trust-run-code`` to resume)."""
    try:
        record = _record_path(config_path) if written is None else _store() / hashlib.sha256(written).hexdigest()
        record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        scratch = record.with_name(f".{record.name}.{os.getpid()}")
        scratch.write_text(str(Path(config_path).resolve()) + "\n", encoding="utf-8")  # for a reader: where
        os.chmod(scratch, 0o600)
        os.replace(scratch, record)
    except OSError:
        pass


def is_own_config(config_path: Path) -> bool:
    """Whether this user recorded the very bytes of ``config_path`` as their own (:func:`record_own_config`):
    the record a regular file of theirs that no one else can write."""
    try:
        return _is_recorded(hashlib.sha256(Path(config_path).read_bytes()).hexdigest())
    except (OSError, ValueError):
        return False


def check_config_code(config: Config, config_path: Path, trust: bool, *, who: str, instead: str,
                      model_only: bool = False) -> None:
    """The one rule (module docstring): refuse (exit 2) the code ``config_path`` names - what
    :func:`run_code` finds, or only the model's own files with ``model_only`` - unless ``trust``
    (``--trust-run-code``) or the config is this user's own (:func:`is_own_config`). ``who``
    starts the message (the flag or argument that named the file); ``instead`` ends it."""
    if trust:
        return
    digest, saved = _as_loaded(config, Path(config_path))  # the bytes loaded, judged: not the path's later ones
    code = run_code(config, saved)
    if _is_recorded(digest):
        # the record vouches for these bytes, not for the model the command loads from beside them:
        # model.trust_remote_code imports the checkpoint's own files, so the directory must be mine alone
        if MODEL_CODE not in code or _only_mine(Path(config_path).parent):
            return
        raise ConfigError(
            f"{who}: {str(config_path)!r} is recorded as yours, but it sets model.trust_remote_code and its "
            f"directory {str(Path(config_path).parent)!r} is not yours alone (another user's, or writable by "
            "others): the model's own Python files loaded from there may be someone else's. Pass "
            f"--trust-run-code to load them, {instead}")
    if model_only:
        code = [c for c in code if c == MODEL_CODE]
    if code:
        raise ConfigError(
            f"{who}: {str(config_path)!r} would run code or reach your secrets or servers: {'; '.join(code)}. "
            "A config read from a run directory or a file may come from someone else, with or without its "
            ".steadyrl-run marker, and this one is not recorded as yours (steadyrl train writes that record for "
            f"the runs it starts here): pass --trust-run-code to load that code, {instead}")


def check_run_code(config: Config, run_dir: Path, trust: bool) -> None:
    """``eval --output-dir RUN``: :func:`check_config_code` of ``run_dir``'s config.yaml."""
    check_config_code(config, run_dir / "config.yaml", trust, who=f"--output-dir {str(run_dir)!r}",
                      instead="or give a config of your own (steadyrl eval CONFIG.yaml --output-dir RUN)")
