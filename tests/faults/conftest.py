"""Fixtures of the fault tests: a task whose reward file can fail on purpose, a config writer for
the tiny model, a way to read back what a run left behind, and ``steadyrl train`` as a process.

The misbehaving rewards count their own calls in a file named by their ``counter`` option (one
call = one step's batch; the file survives the worker process being killed and re-forked on a
time-out), so a test picks the steps on which they misbehave with ``calls: [2, 3]``.

The fixtures of ``tests/trainer/conftest.py`` are not visible here (pytest scopes a conftest to
its folder): ``fault_task`` / ``fault_config`` follow the same pattern with this reward file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
TIMING = ("time/", "throughput/")

REWARDS = '''"""Rewards that misbehave on chosen calls (1-based, counted in the file ``counter``)."""
import math
import time
from pathlib import Path


def _call(counter):
    path = Path(counter)
    n = int(path.read_text() or 0) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


def partial_reverse(prompts, completions, answer, **columns):
    """Fraction of leading characters right: a dense signal, so every step moves the policy."""
    out = []
    for c, a in zip(completions, answer):
        c = c.strip()
        out.append(sum(1 for x, y in zip(c, a) if x == y) / max(len(a), len(c), 1))
    return out


def huge(prompts, completions, answer, counter, calls=(), value=1e38, **columns):
    """+-value (alternating, so a group is never all equal) on the chosen calls."""
    if _call(counter) in calls:
        return [value if i % 2 else -value for i in range(len(completions))]
    return partial_reverse(prompts, completions, answer)


def none_and_nan(prompts, completions, answer, **columns):
    """None for samples 0, 4, 8, ..., NaN for samples 1, 5, 9, ...: half the batch unscorable."""
    good = partial_reverse(prompts, completions, answer)
    return [None if i % 4 == 0 else math.nan if i % 4 == 1 else good[i] for i in range(len(completions))]


def raises(prompts, completions, answer, counter, calls=(), **columns):
    if _call(counter) in calls:
        raise ValueError("the verifier cannot parse this batch")
    return [1.0] * len(completions)


def sleeps(prompts, completions, answer, counter, calls=(), seconds=30.0, **columns):
    if _call(counter) in calls:
        time.sleep(seconds)
    return [0.5] * len(completions)


def constant(prompts, completions, value=1.0, **columns):
    return [value] * len(completions)


def always_raises(prompts, completions, answer, **columns):
    raise RuntimeError("this reward is broken for every sample")


def needs_solution(completions, solution, **kwargs):
    """TRL-style, reading a column the data lacks; its reads_columns (which replaces what the
    signature says) hides that from the start-up check."""
    return [float(s in c) for c, s in zip(completions, solution)]


needs_solution.reads_columns = ("answer",)


def type_error_inside(completions, **kwargs):
    return [len(c) + "1" for c in completions]
'''


@pytest.fixture(scope="session")
def fault_task(tmp_path_factory) -> Path:
    """``train.jsonl`` (reverse-a-string prompts) and ``rewards.py`` (the rewards above)."""
    from steadyrl.demo.task import make_splits

    root = tmp_path_factory.mktemp("fault_task")
    train, _ = make_splits(64, 0, min_len=3, max_len=4, seed=0)
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (root / "rewards.py").write_text(REWARDS)
    return root


@pytest.fixture
def reward(fault_task, tmp_path):
    """``reward(fn, **options) -> rewards[] item`` for a function of the fault reward file; a
    ``counter`` option is filled in for the functions that count their calls, and those that count
    calls or depend on a sample's place in the batch are called on the whole batch at once."""

    def make(fn: str, timeout_s: float | None = None, **options) -> dict:
        if fn in ("huge", "raises", "sleeps"):
            options.setdefault("counter", str(tmp_path / f"calls-{fn}"))
        item = {"name": f"{fault_task / 'rewards.py'}:{fn}", "options": options}
        if fn in ("huge", "raises", "sleeps", "none_and_nan"):
            item["chunk_size"] = None  # they count calls or look at a sample's place in the batch
        if timeout_s is not None:
            item["timeout_s"] = timeout_s
        return item

    return make


@pytest.fixture
def fault_config(tiny_model_dir, fault_task, tmp_path):
    """``fault_config(**sections) -> path``: a config for the tiny model (no held-out prompts, no
    samples table, checkpoints only at the end, one thread); sections are merged in."""

    import support

    return support.config_writer({
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"train_path": str(fault_task / "train.jsonl")},
        "rewards": [{"name": f"{fault_task / 'rewards.py'}:partial_reverse"}],
        "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 6},
        "algorithm": {"kl_mode": "none"},
        "optim": {"lr": 1e-3},
        "trainer": {"max_steps": 4, "save_every": 0, "samples_every": 0, "micro_batch_size": 16,
                    "num_threads": 1, "device": "cpu", "seed": 7},
        "eval": {"num_samples": 0},
    }, tmp_path / "config.yaml")


@pytest.fixture(scope="session")
def read_run():
    """``read_run(run_dir) -> (rows, weights)``: the lines of ``metrics.jsonl`` as written (nulls
    kept) without the timing metrics, and the newest checkpoint's policy weights (``{}`` if none)."""
    from steadyrl.tracking import read_jsonl

    def read(run_dir: Path) -> tuple[list[dict], dict[str, torch.Tensor]]:
        lines = read_jsonl(run_dir / "metrics.jsonl")
        rows = [{k: v for k, v in m.items() if not k.startswith(TIMING)} for m in lines]
        return rows, _weights(latest(run_dir))

    return read


@pytest.fixture(scope="session")
def checkpoint_weights():
    """``checkpoint_weights(checkpoint_dir) -> {name: tensor}`` of its ``policy/`` (``{}`` for None)."""
    return _weights


def _weights(checkpoint: Path | None) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {} if checkpoint is None else load_file(checkpoint / "policy" / "model.safetensors")


def latest(run_dir: Path) -> Path | None:
    from steadyrl.run.checkpoint import latest_checkpoint

    return latest_checkpoint(run_dir / "checkpoints")


@pytest.fixture
def start_train():
    """``start_train(config, output_dir, *args) -> Popen``: ``python -m steadyrl train`` in a fresh
    process (offline, one thread, no progress bar), its output in ``output_dir.log``. Processes
    still running when the test ends (it failed half-way) are killed."""
    started: list[subprocess.Popen] = []

    def start(config: Path, output_dir: Path, *args: str) -> subprocess.Popen:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
               "STEADYRL_NO_PROGRESS": "1", "PYTHONPATH": str(REPO)}
        log = open(output_dir.with_name(output_dir.name + ".log"), "ab")
        cmd = [sys.executable, "-m", "steadyrl", "train", str(config), "--output-dir", str(output_dir), *args]
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture(scope="session")
def steadyrl_cli_env() -> dict:
    """The environment of a ``python -m steadyrl`` subprocess: offline, one thread, this tree."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
            "STEADYRL_NO_PROGRESS": "1", "PYTHONPATH": str(REPO)}
