"""steadyrl.tracking: where a run's numbers go.

``metrics.jsonl`` (and ``samples.jsonl``) in the run directory, always; TensorBoard, Weights &
Biases, MLflow and Trackio when asked for, each imported only then. :func:`read_metrics` reads a
run back (for ``steadyrl plot``, notebooks, tests). See ``docs/tracking.md``.
"""

from .backends import BACKENDS, INSTALL_HINT, BackendName, check_backends_available, samples_markdown
from .jsonl import jsonable, read_jsonl, truncate_jsonl
from .tracker import METRICS_FILE, SAMPLES_FILE, STATE_FILE, Tracker, read_metrics, read_samples

__all__ = [
    "BACKENDS",
    "INSTALL_HINT",
    "METRICS_FILE",
    "SAMPLES_FILE",
    "STATE_FILE",
    "BackendName",
    "Tracker",
    "check_backends_available",
    "jsonable",
    "read_jsonl",
    "read_metrics",
    "read_samples",
    "samples_markdown",
    "truncate_jsonl",
]
