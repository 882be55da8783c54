"""The pieces of a step: the stages :func:`steadyrl.recipe.train_step` calls in order (``dynamic``,
``step``, ``global_batch``, ``processing``, ``mismatch``, ``update``) and the tensor-level modules
they use (``batch``, ``forward``, ``packing``, ``turn_samples``). Nothing here imports the recipe or
the harness above it (:mod:`steadyrl.recipe`, :mod:`steadyrl.run`, :mod:`steadyrl.assembly`)."""
