"""The RL loop: :mod:`.recipe` (``train``, ``train_step``, ``evaluate_run``) and the pieces of a step.

``train`` and ``evaluate_run`` are loaded on first use: the builders (:mod:`steadyrl.build`) and the
harness (:mod:`steadyrl.run`) use the step's tensor-level modules (``forward``, ``packing``,
``batch``), and importing one of those must not load the recipe that imports them.
"""

__all__ = ["train", "evaluate_run"]


def __getattr__(name: str):
    if name in __all__:
        from . import recipe

        return getattr(recipe, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
