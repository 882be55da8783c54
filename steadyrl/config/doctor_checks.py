"""The config checks of the in-run doctor's settings (``trainer.halt_on``, ``trainer.doctor_thresholds``):
called by the config layer when it validates them, so a name that is not a detector or a threshold
is an error at load time (exit 2) naming the key, the value and the valid names. Pure Python."""

from __future__ import annotations

from typing import Any


DETECTOR_NAMES = ("zero_variance", "truncation", "length_hacking", "reward_vs_heldout", "dominance",
                  "entropy_collapse", "entropy_explosion", "clip_drift", "mismatch", "grad_spikes",
                  "skipped_steps", "staleness", "lost_updates", "failed_episodes", "judge_silent")
"""The run-triage detectors' names in registration order: the torch-free view of
:data:`steadyrl.doctor.DETECTORS` that the config reads (the doctor sits above the config), kept
equal to the registry by a test (tests/config/test_doctor_checks.py)."""


def detector_names() -> list[str]:
    """Every run-triage detector, in registration order."""
    return list(DETECTOR_NAMES)


def check_doctor_setting(key: str, value: Any, *, doctor_every: int | None = None) -> None:
    """A :class:`ValueError` naming what is wrong with ``trainer.<key> = value`` (``doctor_every``:
    ``trainer.doctor_every``, without which nothing could halt)."""
    if key == "halt_on" and value and doctor_every == 0:
        raise ValueError(f"{value!r} needs the detectors to run: trainer.doctor_every = 0 turns them off; "
                         "set trainer.doctor_every >= 1 or trainer.halt_on=[]")
    if key == "halt_on":
        valid = detector_names()
        unknown = [name for name in value if name not in valid]
        if unknown:
            raise ValueError(f"{value!r}: {', '.join(map(repr, unknown))} is not a detector; valid names: "
                             f"{', '.join(valid)}")
    elif key == "doctor_thresholds":
        from .doctor_thresholds import Thresholds

        valid = list(Thresholds.help())
        unknown = [name for name in value if name not in valid]
        if unknown:
            raise ValueError(f"{value!r}: {', '.join(map(repr, unknown))} is not a threshold; valid names: "
                             f"{', '.join(valid)}")
        Thresholds().with_overrides([f"{k}={v}" for k, v in value.items()], key="entry")
