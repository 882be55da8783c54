"""How a reward function is called: steadyrl's positional convention or TRL's keywords, decided
once per function from its signature.

Two conventions exist for the same job:

* steadyrl's: ``fn(prompts, completions, **columns)``, prompts and completions positional and
  always text (the prompt after the chat template, the completion as decoded);
* TRL's (``GRPOTrainer``): everything by keyword, ``fn(prompts=..., completions=...,
  completion_ids=..., **columns)``; when the dataset's prompt is a list of chat messages, a
  prompt is that list and a completion is ``[{"role": "assistant", "content": text}]``.

The rule, read from ``inspect.signature(fn)`` (:func:`plan_call`):

1. **positional** (steadyrl's) when the first two parameters that can be given positionally are
   named ``prompts`` and ``completions``; also when the function names none of ``prompts``,
   ``completions``, ``completion_ids`` and can take two positional arguments
   (``def f(p, c, **kw)``, ``def f(*args, **kw)``: what steadyrl always called positionally),
   and when it has no signature to read;
2. **keyword** (TRL's) otherwise: ``def reward_len(completions, **kwargs)``,
   ``def accuracy(completions, solution, **kwargs)``, ``def f(completions, completion_ids, **kw)``.

TRL's own ``def f(prompts, completions, answer, **kwargs)`` reads as rule 1. On chat data, such a
function that fails on text as if it expected message lists (``c[0]["content"]`` on a string) is
found by the dry call before step 1 (:func:`steadyrl.rewards.scorer.dry_call`) and called TRL's way
from then on: :data:`CALL_STYLE_ATTR` = ``"trl"`` on the function forces the keyword plan.

In both, a function with ``**kwargs`` receives every column and one without receives only the
columns it names. ``completion_ids`` (each completion's token ids, EOS included) goes to a
keyword-style function that names it or has ``**kwargs``, and to a positional-style one only when
it names it (its ``**kwargs`` see exactly what they always did); a keyword-style function gets
``prompts`` and ``completions`` only when it names them or has ``**kwargs``.

:func:`invoke` is the call, in whatever process or thread the runner uses; :func:`call_error`
binds the same arguments to the signature beforehand, in the trainer, so that a call the
function cannot take (a missing column, two values for one parameter) is told apart from a
``TypeError`` raised inside the function's body.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Literal

__all__ = ["CallPlan", "PlannedReward", "TRL_ARGUMENTS", "TRL_NOT_PASSED", "CALL_STYLE_ATTR", "plan_call", "invoke",
           "call_error", "describe_call", "chat_shape_hint", "looks_like_chat_shape_error"]

CALL_STYLE_ATTR = "steadyrl_call_style"
"""The attribute that overrides the signature's rule: ``"trl"`` calls the function TRL's way (by
keyword, message lists on chat data) whatever its signature; set by
:func:`~steadyrl.rewards.loader.load_reward` ``(call_style="trl")``."""

TRL_ARGUMENTS = ("prompts", "completions", "completion_ids")
"""What TRL passes besides the dataset's columns."""

TRL_NOT_PASSED = {
    "trainer_state": "TRL's trainer state (global_step, epoch, ...)",
    "log_extra": "TRL's callback that adds a column to its table of logged completions",
    "log_metric": "TRL's callback that logs a metric",
}
"""Keywords TRL's GRPOTrainer passes that steadyrl does not: a function that needs one (no
default) is refused at load, naming it, rather than asking the data for such a column."""

_P = inspect.Parameter
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
_BY_NAME = (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)


@dataclass(frozen=True)
class CallPlan:
    """How to call one function. ``accepts``: the names it takes by keyword (``None``: it has
    ``**kwargs``); ``columns``: the dataset columns it cannot run without."""

    style: Literal["positional", "keyword"]
    accepts: frozenset[str] | None
    takes_ids: bool
    columns: tuple[str, ...]

    def wants(self, name: str) -> bool:
        return self.accepts is None or name in self.accepts


def _signature(fn) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # some C callables have none
        return None


def plan_call(fn) -> CallPlan:
    """The call plan of ``fn`` (see the module docstring for the rule)."""
    sig = _signature(fn)
    trl = getattr(fn, CALL_STYLE_ATTR, None) == "trl"
    if sig is None:
        return CallPlan("keyword" if trl else "positional", None, trl, ())
    params = list(sig.parameters.values())
    accepts = None if any(p.kind is _P.VAR_KEYWORD for p in params) else \
        frozenset(p.name for p in params if p.kind in _BY_NAME)
    positional = [p for p in params if p.kind in _POSITIONAL]
    named = {p.name for p in params} & set(TRL_ARGUMENTS)
    two_positional = len(positional) >= 2 or any(p.kind is _P.VAR_POSITIONAL for p in params)
    steadyrl = [p.name for p in positional[:2]] == ["prompts", "completions"]
    if not trl and (steadyrl or (not named and two_positional)):
        filled = {p.name for p in positional[:2]}
        takes_ids = "completion_ids" in named
        style = "positional"
    else:
        filled, style = set(), "keyword"
        takes_ids = accepts is None or "completion_ids" in accepts
    columns = tuple(p.name for p in params if p.kind in _BY_NAME and p.default is p.empty
                    and p.name not in filled and p.name not in TRL_ARGUMENTS)
    return CallPlan(style, accepts, takes_ids, columns)


def needs_trl_only(fn) -> list[str]:
    """The keywords of :data:`TRL_NOT_PASSED` that ``fn`` cannot run without (no default)."""
    sig = _signature(fn)
    if sig is None:
        return []
    return [p.name for p in sig.parameters.values()
            if p.name in TRL_NOT_PASSED and p.kind in _BY_NAME and p.default is p.empty]


@dataclass(frozen=True)
class PlannedReward:
    """A reward function with its call plan, made once (before a worker process is forked).
    Calling it as ``f(prompts, completions, **columns)`` goes through :func:`invoke`."""

    fn: object
    plan: CallPlan

    @classmethod
    def of(cls, fn) -> PlannedReward:
        return fn if isinstance(fn, PlannedReward) else cls(fn, plan_call(fn))

    def __call__(self, prompts, completions, **columns):
        return invoke(self, prompts, completions, columns)


def _arguments(plan: CallPlan, prompts, completions, columns: dict) -> tuple[tuple, dict]:
    kwargs = columns if plan.accepts is None else {k: v for k, v in columns.items() if k in plan.accepts}
    if plan.style == "positional":
        return (prompts, completions), dict(kwargs)
    first = {k: v for k, v in (("prompts", prompts), ("completions", completions)) if plan.wants(k)}
    return (), {**first, **kwargs}


def chat_shape_hint(plan: CallPlan, error: str) -> str | None:
    """What to tell a function called steadyrl's way (text) on chat data that failed as if it
    expected TRL's message lists (``completion[0]["content"]`` on a string), else ``None``."""
    if plan.style != "positional" or not any(kind in error for kind in _SHAPE_ERRORS):
        return None
    return ("note: this function takes prompts and completions positionally, so steadyrl calls it its own way: "
            "prompts[i] is the prompt as text after the chat template, completions[i] the decoded completion as "
            "text (a str), whatever the data. TRL passes chat data as message lists (prompts[i] a list of "
            "{'role', 'content'} dicts, completions[i] [{'role': 'assistant', 'content': text}]); to get those, "
            "make the two keyword-only: def f(*, prompts, completions, **kwargs) (docs/rewards.md, 'How a "
            "function is called')")


def looks_like_chat_shape_error(error: str) -> bool:
    """Whether ``error`` (a failure's text) is what TRL-style code raises on a str where it expected
    a message list."""
    return any(kind in error for kind in _SHAPE_ERRORS)


_SHAPE_ERRORS = ("string indices must be integers", "TypeError: 'str' object", "AttributeError: 'str' object",
                 "KeyError: 'content'", "KeyError: 'role'")


def invoke(fn, prompts, completions, columns: dict):
    """Call ``fn`` (a :class:`PlannedReward`, or a plain function planned here) on a batch.
    ``columns`` holds ``completion_ids`` when the function is to receive them."""
    planned = PlannedReward.of(fn)
    args, kwargs = _arguments(planned.plan, prompts, completions, columns)
    return planned.fn(*args, **kwargs)


def describe_call(fn, prompts, completions, columns: dict) -> str:
    """The call as it is made, values left out: ``accuracy(prompts=..., completions=..., solution=...)``."""
    planned = PlannedReward.of(fn)
    args, kwargs = _arguments(planned.plan, prompts, completions, columns)
    name = getattr(getattr(planned.fn, "func", planned.fn), "__name__", type(planned.fn).__name__)
    shown = ["prompts", "completions"][: len(args)] + [f"{k}=..." for k in kwargs]
    return f"{name}({', '.join(shown)})"


def call_error(fn, prompts, completions, columns: dict) -> str | None:
    """Why ``fn`` cannot take this call (``inspect``'s binding error), or ``None`` if it can or
    its signature cannot be read. Nothing is called."""
    planned = PlannedReward.of(fn)
    sig = _signature(planned.fn)
    if sig is None:
        return None
    args, kwargs = _arguments(planned.plan, prompts, completions, columns)
    try:
        sig.bind(*args, **kwargs)
    except TypeError as err:
        return str(err)
    return None
