"""Python warnings during a run: each distinct one printed once, and counted.

A library may warn on every call (transformers' deprecation notices fire on each forward), and
any ``warnings.catch_warnings()`` block resets the "once per location" memory Python's default
filter relies on, so the same text would be printed several times per step. For the length of a
run, :func:`warnings_once` prints a warning the first time its category and text are seen (with a
note that it is shown once) and drops later copies; ``take(counted)`` returns how many distinct warnings
were printed since it was last called and not counted before, which the recipe adds to ``health/warnings``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from ..printable import printable
from ..secrets import redact_text

# The schedule counts training steps, skipped ones included: stepping it without an optimizer
# step is intended, so torch's note about it is not shown.
_IGNORED = (r"Detected call of `lr_scheduler\.step\(\)` before",
            # peft asks transformers 5 by the old name, on every LoRA step with gradient checkpointing
            r"`is_gradient_checkpointing` is deprecated",)


class WarningsSeen:
    """The distinct warnings printed so far in this run, and how many are not yet counted."""

    def __init__(self) -> None:
        self.seen: set[tuple[type, str]] = set()
        self.uncounted: list[str] = []

    def take(self, counted: list[str]) -> int:
        """The number of distinct warnings printed since the last call that are not in ``counted``
        (the run's list, carried by its checkpoints: a resumed run does not count again what the
        run already counted before it stopped, so its metrics equal the uninterrupted run's);
        each is added to ``counted``."""
        new = [key for key in dict.fromkeys(self.uncounted) if key not in counted]
        counted.extend(new)
        self.uncounted = []
        return len(new)


@contextmanager
def warnings_once() -> Iterator[WarningsSeen]:
    """Within the block every warning that passes the filters is printed once per (category, text)."""
    seen = WarningsSeen()
    with warnings.catch_warnings():
        for message in _IGNORED:
            warnings.filterwarnings("ignore", message=message)
        show = warnings.showwarning

        def show_once(message, category, filename, lineno, file=None, line=None):
            key = (category, printable(redact_text(str(message))))  # a warning may quote a key or model text
            if key in seen.seen:
                return
            seen.seen.add(key)
            seen.uncounted.append(f"{category.__name__}: {key[1]}")
            text = f"{key[1]} (steadyrl shows each warning once per run)"
            show(text, category, filename, lineno, file, None if line is None else redact_text(line))

        warnings.showwarning = show_once
        yield seen
