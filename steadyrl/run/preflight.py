"""The checks of ``steadyrl train`` / ``eval`` input that need no model, made before torch is imported.

Importing torch and transformers takes seconds (more on a busy machine); a typo should not.
:mod:`steadyrl.cli` loads the config, runs :func:`check_train` or :func:`check_eval`, and only
then imports the trainer. What is checked here, in the order the run itself checks it:

* the run directory (``train``): in use by another run (its lock, probed, not taken), and what
  ``--resume`` / ``--overwrite`` need of it;
* the data: every file, split and column (:func:`steadyrl.build.task.check_task`), and the reward
  functions (loaded from their specs, checked against the columns they read);
* ``rollout.tools`` / ``rollout.tool_parser`` / ``rollout.environment`` specs;
* every model directory or hub name the run loads (exists, is a ``save_pretrained`` directory,
  weight files whole; a hub name cached or the hub reachable);
* ``eval``: that there are held-out prompts to evaluate at all.

The run checks the same things again when it builds (data and rewards are read twice: cheap
next to a model load); what needs the model — the tokenizer, the chat template, prompt lengths
against the context — is checked there only. Nothing here imports torch, unless a user's reward
or tool module does (a reward model's reward loads it: it needs a model anyway).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..agents.build import check_agent_specs
from ..build.task import check_task
from ..config.schema import Config
from ..errors import ConfigError
from ..gguf_model import check_gguf_file
from ..model_files import check_model_paths, check_model_source
from ..tracking import check_backends_available
from .directory import check_output_dir, probe_lock


def check_train(config: Config, *, output_dir: str | None, resume: bool, overwrite: bool) -> None:
    """Everything :func:`steadyrl.trainer.train` would refuse that needs no model, in its order."""
    if output_dir and os.environ.get("RANK", "0") == "0":  # rank 0 takes the lock; the others would see it
        probe_lock(Path(output_dir))
    if output_dir:
        check_output_dir(Path(output_dir), resume, overwrite)
    check_backends_available(config.trainer.trackers)
    if config.is_demo:  # the built-in task: its data are generated, its model built in the run directory
        return
    check_task(config, quiet=True)
    check_agent_specs(config)
    if config.model.gguf_file:  # converted when the run starts; its header is checked now
        check_gguf_file(config)
    else:
        check_model_paths(config, config.model.name_or_path)


def check_eval(config: Config, model_path: str | None, *, of_run_dir: bool) -> None:
    """Everything :func:`steadyrl.trainer.evaluate_run` would refuse that needs no model.
    ``model_path``: the model to evaluate (None for a run directory's checkpoint, found later)."""
    check_eval_source(config, model_path, of_run_dir=of_run_dir)
    if config.is_demo:
        return
    _, evals, _, _ = check_task(config, for_eval=True, quiet=True)
    if not evals:
        raise ConfigError(NOTHING_TO_EVALUATE)
    check_agent_specs(config)
    if model_path is not None:
        check_model_source("model.name_or_path", model_path)


NOTHING_TO_EVALUATE = "nothing to evaluate: set data.eval_path to a file of held-out prompts"


def check_eval_source(config: Config, model_path: str | None, *, of_run_dir: bool) -> None:
    """A model evaluated without a config file of its own has no held-out prompts: the demo's
    are meant for the demo's model."""
    if config.is_demo and not of_run_dir and not config.data.eval_path:
        raise ConfigError(
            f"nothing to evaluate model {model_path!r} on: data.eval_path is not set (without a config, "
            "held-out prompts would be the built-in string-reversal demo's); give a config with "
            "data.eval_path, or data.eval_path=FILE; a demo run is evaluated with --output-dir RUN_DIR")
