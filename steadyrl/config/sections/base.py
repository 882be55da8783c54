"""The building blocks every config section shares: :class:`Section` (no extra keys, no booleans read
as numbers, no NaN), ``F`` (a field with its help text) and the bounds of sizes, lengths and limits.

Part of the typed configuration (:mod:`steadyrl.config.schema` re-exports every section).
"""

from __future__ import annotations


import math
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator



ASYNC_TIS_CAP = 2.0
"""``rollout.tis_cap`` when unset with asynchronous rollouts (stale batches); null otherwise."""

MAX_TOKENS = 2**24
"""Most tokens a length setting may name (16,777,216: past any model's context): a typo such as
``max_new_tokens: 1000000000000`` is refused when the config is read, not by the OOM killer."""
MAX_SAMPLES = 2**20
"""Most samples, prompts or passes a batch setting may name (1,048,576; also prompts_per_step x
group_size)."""
MAX_WIDTH = 2**16
"""Most of a model size (LoRA rank, the demo model's layers, width and heads, the demo's string length)."""
MAX_MIB = 2**30
"""Most MiB (KiB for output_kib) of a worker limit: 1 PiB, as far as the kernel's limits go."""
MAX_SECONDS = 2**31 - 1
"""Most CPU seconds of a worker limit (what RLIMIT_CPU holds everywhere)."""
MAX_PROCESSES = 2**22
"""Most processes (the kernel's largest pid_max), and tool workers."""


def F(default: Any, help: str, **constraints: Any) -> Any:
    """A field with its help text (shown by ``steadyrl config show``)."""
    return Field(default, description=help, **constraints)


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, (list, tuple)):
        return any(_has_nan(v) for v in value)
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    return False


def _number_type(annotation: Any) -> type | None:
    """``int`` or ``float`` when a field holds a number (or null), else None."""
    if annotation in (int, float):
        return annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _number_type(args[0])
    if origin in (typing.Union, types.UnionType):
        kinds = {_number_type(a) for a in args if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    return None


def _valid_numbers(annotation: Any, metadata: list) -> str:
    """What a number field accepts, in words: ``an integer >= 1``, ``a number > 0 or null``."""
    if typing.get_origin(annotation) is Annotated:  # a tuple's item: its constraints live inside
        inner = typing.get_args(annotation)[1:]
        metadata = [m for info in inner for m in getattr(info, "metadata", [info])]
    kind = "an integer" if _number_type(annotation) is int else "a number"
    bounds = [f"{op} {getattr(m, attr)}" for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
              for m in metadata if hasattr(m, attr)]
    text = f"{kind} {' and '.join(bounds)}" if bounds else kind
    return text + (" or null" if type(None) in typing.get_args(annotation) else "")


def _boolean_for_number(annotation: Any, metadata: list, value: Any) -> str | None:
    """Why ``value`` is refused when it is a boolean where a number belongs (pydantic would read
    ``true`` as 1), else None. Looks inside tuples (``optim.betas``)."""
    if isinstance(value, bool) and _number_type(annotation) is not None:
        return f"a boolean is not a number; valid: {_valid_numbers(annotation, metadata)}"
    if typing.get_origin(annotation) is tuple and isinstance(value, (list, tuple)):
        for item_annotation, item in zip(typing.get_args(annotation), value):
            problem = _boolean_for_number(item_annotation, [], item)
            if problem:
                return problem
    return None


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads true as 1 and false as 0 in a number field: rollout.group_size=true would
        # quietly be 1.
        field = cls.model_fields[info.field_name]
        problem = _boolean_for_number(field.annotation, field.metadata, value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _no_nan(cls, value: Any) -> Any:
        # NaN passes every unconstrained float field (a reward weight of .nan silently makes every
        # score NaN); infinity stays allowed (max_grad_norm: .inf turns clipping off).
        if _has_nan(value):
            raise ValueError("NaN is not a valid value")
        return value


Beta = Annotated[float, Field(ge=0, lt=1)]
