"""What code a run directory's ``config.yaml`` makes steadyrl run, and eval's check of it.

A run directory is not only data: its saved config names reward functions by file or module
(``rewards/my.py:score`` is executed when loaded), tools, a tool-call parser or an environment
the same way (``rollout.tools``, ``rollout.tool_parser``, ``rollout.environment``), and may set
``model.trust_remote_code`` (the model's own Python files are executed when it loads). ``steadyrl eval --output-dir RUN``
takes both from the run's config, so evaluating a run directory someone else wrote would run their
code: it does so only with ``--trust-run-code``. ``train --resume`` of a run you started is
continuing your own code and needs no flag (see docs/rewards.md, "Whose code runs").
"""

from __future__ import annotations

from pathlib import Path

from ..config.loading import get_dotted, read_yaml
from ..config.schema import Config
from ..errors import ConfigError
from ..rewards import BUILTIN_REWARDS

__all__ = ["BUILTIN_TOOLS", "run_code", "check_run_code"]

BUILTIN_TOOLS = frozenset({"steadyrl.demo.calculator:calculate"})
"""Tools that are steadyrl's own code (the tool demo's calculator): naming them runs nothing new."""


def run_code(config: Config, saved: dict) -> list[str]:
    """The code ``config`` loads that came from the saved config ``saved`` (a key the command
    line set is the user's own choice): user reward specs, tools, a tool parser or an environment,
    and ``model.trust_remote_code``."""
    saved_rewards = get_dotted(saved, ["rewards"]) or []
    saved_names = {r.get("name") for r in saved_rewards if isinstance(r, dict)}
    code = [f"reward {r.name!r}" for r in config.rewards if r.name not in BUILTIN_REWARDS and r.name in saved_names]
    ro = config.rollout
    saved_tools = get_dotted(saved, ["rollout", "tools"]) or []
    code += [f"tool {t!r}" for t in ro.tools if t in saved_tools and t not in BUILTIN_TOOLS]
    if ro.environment is not None and ro.environment == get_dotted(saved, ["rollout", "environment"]):
        code.append(f"environment {ro.environment!r}")
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
            f"--output-dir {str(run_dir)!r}: its config.yaml would run code: {'; '.join(code)}. A run directory "
            "may come from someone else: pass --trust-run-code to load that code, or give a config of your own "
            "(steadyrl eval CONFIG.yaml --output-dir RUN)")
