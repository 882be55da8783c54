"""Checks made before a run, one room for "before a run":

* :mod:`.inputs`: the input checks ``steadyrl train`` / ``eval`` make before torch is imported
  (config, data, rewards, model paths, run directory);
* :mod:`.gap` (``steadyrl doctor CONFIG.yaml``): the engine-vs-trainer log-prob gap measured on a
  few prompts before any step, with :mod:`.engine_side`, :mod:`.roundtrip`, :mod:`.attribution`
  (what the gap comes from) and :mod:`.report` (the page it writes).

It sits above the harness (:mod:`steadyrl.run`) and the builders (:mod:`steadyrl.assembly`), which it
uses; nothing below imports it.
"""
