"""The harness around the recipe (:mod:`steadyrl.recipe`): what a run owns besides its models.

* :mod:`.directory` — the run directory: its name, lock, marker, saved config and the checks on it;
* :mod:`.checkpoint` — checkpoint files: atomic writes, pruning, loading, RNG state;
* :mod:`.trust` — which code a run directory's own config may run;
* :mod:`.evaluate` — held-out evaluation (accuracy, pass@k) with an RNG of its own;
* :mod:`.asynchronous` and :mod:`.rollout_worker` — the asynchronous rollout worker.

Nothing here imports the recipe; the asynchronous worker uses the trainer's tensor-level modules
(:mod:`steadyrl.trainer.batch`, :mod:`steadyrl.trainer.forward`), which import nothing from here.
"""
