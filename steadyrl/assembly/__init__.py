"""Building a run from its config: everything checked first, then models, optimizer and task.

* :mod:`.setup` — the run (:class:`~.setup.Run`): device, models, data parallelism, optimizer,
  schedule, prompts; every input checked before any model weights load;
* :mod:`.prompts` — the prompts rendered and tokenized, checked against the model's context;
* :mod:`.support` — what is not supported together on this device and world size;
* :mod:`.task` — what a run trains on and is scored by: data records and reward functions;
* :mod:`.sources` — several data sources mixed (``data.train_sources`` / ``eval_sources``).

The builders use the trainer's tensor-level modules (:mod:`steadyrl.trainer.forward`,
:mod:`steadyrl.trainer.packing`), which import nothing from here.
"""
