"""``load_reward``: a reward function from a spec string.

A spec is one of:

* a built-in name: ``math``, ``exact_match``, ``normalized_match``, ``regex_format``,
  ``length_penalty``; the options go to its factory;
* ``package.module:function``: imported with :func:`importlib.import_module` (so the package must
  be on ``sys.path`` / ``PYTHONPATH``);
* ``path/to/file.py:function``: the file is executed as a module (relative to the current
  directory, or absolute); its folder is *not* put on ``sys.path``.

For a user function the options are bound as keyword arguments (``functools.partial``), so
``load_reward("my.py:fn", threshold=0.5)`` calls ``fn(prompts, completions, threshold=0.5,
**columns)``. ``function`` may be dotted (``module:Class.method``). Whether it is called the
steadyrl way (positionally) or the TRL way (by keyword) is read from its signature
(:mod:`steadyrl.rewards.calling`); the call is checked here with placeholders, and the columns it
cannot run without become its ``reads_columns``.

Anything that goes wrong raises :class:`~steadyrl.errors.RewardLoadError` naming the spec.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

from ..errors import RewardLoadError
from . import math_verifier, verifiers  # noqa: F401  (registers the built-ins)
from .calling import call_error, describe_call, plan_call
from .registry import BUILTIN_REWARDS, RewardFn

__all__ = ["load_reward", "reward_name"]


def _err(spec: str, what: str) -> RewardLoadError:
    return RewardLoadError(f"reward {spec!r}: {what}")


def _builtin(name: str, options: dict) -> RewardFn:
    factory = BUILTIN_REWARDS[name]
    params = inspect.signature(factory).parameters
    unknown = sorted(set(options) - set(params))
    if unknown:
        raise _err(name, f"unknown option(s) {unknown}; valid options: {sorted(params)}")
    missing = [p.name for p in params.values() if p.default is p.empty and p.name not in options]
    if missing:
        raise _err(name, f"missing required option(s) {missing}; valid options: {sorted(params)}")
    return factory(**options)


def _unknown_name(spec: str) -> RewardLoadError:
    names = sorted(BUILTIN_REWARDS)
    close = difflib.get_close_matches(spec, names, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return _err(
        spec,
        f"not a built-in reward; {hint}built-ins: {names}; "
        "a function of your own is 'package.module:function' or 'path/to/file.py:function'",
    )


def _import_file(spec: str, target: str):
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise _err(spec, f"file {str(path)!r} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"_steadyrl_reward_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise _err(spec, f"{str(path)!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # so classes and pickling inside it find their module
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:
        del sys.modules[module_name]
        raise _err(spec, f"running {str(path)!r} raised {type(err).__name__}: {err}") from err
    return module


def _import_module(spec: str, target: str):
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as err:
        if err.name and (target == err.name or target.startswith(err.name + ".")):
            raise _err(
                spec,
                f"no module named {err.name!r} (is it on sys.path / PYTHONPATH? "
                "a file is given as 'path/to/file.py:function')",
            ) from err
        raise _err(spec, f"importing {target!r} raised ModuleNotFoundError: {err}") from err
    except (Exception, SystemExit) as err:
        raise _err(spec, f"importing {target!r} raised {type(err).__name__}: {err}") from err


def _attribute(spec: str, module, attr: str, shown: str):
    """``module.attr`` (dotted); ``shown`` names the module in errors (the file or module the user wrote)."""
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None)))
            close = difflib.get_close_matches(part, public, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else f"; callables defined there: {public[:20]}"
            owner = shown if obj is module else getattr(obj, "__name__", obj)
            raise _err(spec, f"{owner!r} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
    return obj


def _check_signature(spec: str, bound) -> tuple[str, ...]:
    """Check ``bound`` (the function with its options) can take the call its plan makes; returns
    the dataset columns it requires (parameters without a default that nothing else fills)."""
    try:
        inspect.signature(bound)
    except (TypeError, ValueError) as err:  # options the function has no parameter for
        try:
            sig = inspect.signature(bound.func)
        except (TypeError, ValueError):
            return ()  # no introspectable signature (some C callables): trust it
        unknown = sorted(set(bound.keywords) - set(sig.parameters))
        raise _err(spec, f"option(s) {unknown or sorted(bound.keywords)} are not parameters of the function, "
                         f"which has no **kwargs; its signature is {sig}") from None
    plan = plan_call(bound)
    # the columns arrive only at call time: bind placeholders (and token ids when it takes them)
    columns = {c: [] for c in plan.columns} | ({"completion_ids": []} if plan.takes_ids else {})
    why = call_error(bound, [], [], columns)
    if why is not None:
        raise _err(spec, f"cannot be called as {describe_call(bound, [], [], columns)}: {why}; signature "
                         f"{inspect.signature(bound)} (see docs/rewards.md, 'How a function is called')")
    return plan.columns


def load_reward(spec: str, **options) -> RewardFn:
    """The reward function named by ``spec`` (see the module docstring)."""
    if not isinstance(spec, str) or not spec.strip():
        raise RewardLoadError(f"reward spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec in BUILTIN_REWARDS:
        return _builtin(spec, options)
    if ":" not in spec:
        raise _unknown_name(spec)
    target, attr = spec.rsplit(":", 1)  # rsplit: a Windows path has a drive colon
    if not target or not attr:
        raise _err(spec, "expected 'package.module:function' or 'path/to/file.py:function'")
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    module = _import_file(spec, target) if is_file else _import_module(spec, target)
    fn = _attribute(spec, module, attr, shown=target)
    if not callable(fn):
        raise _err(spec, f"{attr!r} is a {type(fn).__name__}, not a callable")
    bound = functools.partial(fn, **options)
    columns = _check_signature(spec, bound)
    # the columns it cannot run without, checked against the data before the run starts
    bound.reads_columns = tuple(getattr(fn, "reads_columns", columns))
    return bound


def reward_name(spec: str) -> str:
    """A short name for a spec, for metrics: the built-in name or the function's name."""
    spec = spec.strip()
    return spec.rsplit(":", 1)[1].rsplit(".", 1)[-1] if ":" in spec else spec
