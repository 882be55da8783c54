"""The checks of ``steadyrl train`` / ``eval`` input that need no model, made before torch is imported.

Importing torch and transformers takes seconds (more on a busy machine); a typo should not.
:mod:`steadyrl.cli` loads the config, runs :func:`check_train` or :func:`check_eval`, and only
then imports the trainer. What is checked here, in the order the run itself checks it:

* the run directory (``train``): in use by another run (its lock, probed, not taken), and what
  ``--resume`` / ``--overwrite`` need of it;
* the data: every file, split and column (:func:`steadyrl.assembly.task.check_task`), and the reward
  functions (loaded from their specs, checked against the columns they read);
* ``rollout.multi_turn.tools`` / ``rollout.multi_turn.tool_parser`` / ``rollout.multi_turn.environment`` specs;
* every model directory or hub name the run loads (exists, is a ``save_pretrained`` directory,
  weight files whole; a hub name cached or the hub reachable);
* ``train``: a precision that loses updates of large weights (plain AdamW on bfloat16 weights;
  :func:`steadyrl.precision.precision_warnings`), warned about on stderr;
* ``eval``: that there are held-out prompts to evaluate at all.

The run checks the same things again when it builds (data and rewards are read twice: cheap
next to a model load); what needs the model — the tokenizer, the chat template, prompt lengths
against the context — is checked there only. Nothing here imports torch, unless a user's reward
or tool module does (a reward model's reward loads it: it needs a model anyway).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..assembly.task import NOTHING_TO_EVALUATE, task_of  # noqa: F401 - re-exported
from ..config.schema import Config
from ..precision import precision_warnings
from ..tracking import check_backends_available
from ..run.directory import check_output_dir, probe_lock


def check_train(config: Config, *, output_dir: str | None, resume: bool, overwrite: bool) -> None:
    """Everything :func:`steadyrl.recipe.train` would refuse that needs no model, in its order."""
    if output_dir and os.environ.get("RANK", "0") == "0":  # rank 0 takes the lock; the others would see it
        probe_lock(Path(output_dir))
    if output_dir:
        check_output_dir(Path(output_dir), resume, overwrite)
    check_backends_available(config.trainer.trackers)
    task_of(config).preflight_train(config)  # data, rewards, tools, model paths (the demo's are built)
    for warning in precision_warnings(config.model, config.optim,
                                      config.algorithm.advantage_estimator == "gae"):
        print(f"steadyrl: warning: {warning}", file=sys.stderr)


def check_eval(config: Config, model_path: str | None, *, of_run_dir: bool) -> None:
    """Everything :func:`steadyrl.recipe.evaluate_run` would refuse that needs no model.
    ``model_path``: the model to evaluate (None for a run directory's checkpoint, found later)."""
    task_of(config).preflight_eval(config, model_path, of_run_dir)
