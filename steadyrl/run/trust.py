"""What code a run directory's ``config.yaml`` makes steadyrl run, and eval's check of it.

A run directory is not only data: its saved config names reward functions by file or module
(``rewards/my.py:score`` is executed when loaded), tools, a tool-call parser or an environment
the same way (``rollout.tools``, ``rollout.tool_parser``, ``rollout.environment``, ``rollout.agent``), and may set
``model.trust_remote_code`` (the model's own Python files are executed when it loads). The
built-in rewards' options can do as much (:func:`option_findings`): ``trust_remote_code`` at any
depth (``reward_model`` imports the reward model's files), ``python`` (the ``code`` reward runs
that interpreter when it is built), a sandbox loosened (``no_network: false``,
``readonly_fs: false``); and they can reach out: ``api_key_env``, ``{env: NAME}`` and
``env_passthrough`` name the evaluator's own environment variables (their values would go to
whatever the config names), ``url`` / ``base_url`` or any ``http(s)://`` value names a server.

``steadyrl eval --output-dir RUN`` takes all of these from the run's config, so evaluating a run
directory someone else wrote would run their code, or send the evaluator's secrets to their
server: it does so only with ``--trust-run-code``. ``train --resume`` of a run you started is
continuing your own code and needs no flag (see docs/rewards.md, "Whose code runs").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from ..config.loading import get_dotted, read_yaml
from ..config.schema import Config
from ..errors import ConfigError
from ..rewards import BUILTIN_REWARDS
from ..secrets import is_env_reference

__all__ = ["BUILTIN_TOOLS", "CODE_OPTIONS", "ENDPOINT_OPTIONS", "SECRET_OPTIONS", "option_findings", "run_code",
           "check_run_code"]

BUILTIN_TOOLS = frozenset({"steadyrl.demo.calculator:calculate"})
"""Tools that are steadyrl's own code (the tool demo's calculator): naming them runs nothing new."""

BUILTIN_ENVIRONMENTS = ("textarena:",)
"""``rollout.environment`` adapters whose games are an installed package's code (docs/environments.md):
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
    ``model.trust_remote_code``."""
    code = _reward_code(config, saved)
    ro = config.rollout
    saved_tools = get_dotted(saved, ["rollout", "tools"]) or []
    code += [f"tool {t!r}" for t in ro.tools if t in saved_tools and t not in BUILTIN_TOOLS]
    if ro.environment is not None and ro.environment == get_dotted(saved, ["rollout", "environment"]):
        if ro.environment.startswith("openenv:"):  # a server the policy's turns are sent to
            code.append(f"environment {ro.environment!r} (a server the episodes are sent to)")
        elif not ro.environment.startswith(BUILTIN_ENVIRONMENTS):  # an installed package's games run no new code
            code.append(f"environment {ro.environment!r}")
    if ro.agent is not None and ro.agent == get_dotted(saved, ["rollout", "agent"]):
        code.append(f"agent {ro.agent!r}")
    if ":" in ro.tool_parser and ro.tool_parser == get_dotted(saved, ["rollout", "tool_parser"]):
        code.append(f"tool parser {ro.tool_parser!r}")
    if config.model.trust_remote_code and get_dotted(saved, ["model", "trust_remote_code"]) is True:
        code.append("the model's own Python files (model.trust_remote_code = true)")
    return code


def check_run_code(config: Config, run_dir: Path, trust: bool) -> None:
    """Refuse (exit 2) to run code named by ``run_dir``'s config.yaml unless ``trust``."""
    if trust:
        return
    saved = run_dir / "config.yaml"
    code = run_code(config, read_yaml(saved))
    if code:
        raise ConfigError(
            f"--output-dir {str(run_dir)!r}: its config.yaml would run code or reach the evaluator's secrets or "
            f"servers: {'; '.join(code)}. A run directory may come from someone else: pass --trust-run-code to "
            "load that code, or give a config of your own (steadyrl eval CONFIG.yaml --output-dir RUN)")
