"""``load_reward``: a reward function from a spec string.

A spec is one of:

* a built-in name: ``math``, ``exact_match``, ``normalized_match``, ``regex_format``,
  ``length_penalty``; the options go to its factory;
* ``package.module:function`` or ``path/to/file.py:function``: imported by
  :func:`steadyrl.userfn.resolve_spec` (a module must be on ``sys.path`` / ``PYTHONPATH``; a file
  is executed as a module, its folder is *not* put on ``sys.path``).

For a user function the options are bound as keyword arguments (``functools.partial``), so
``load_reward("my.py:fn", threshold=0.5)`` calls ``fn(prompts, completions, threshold=0.5,
**columns)``. ``function`` may be dotted (``module:Class.method``). An option written
``{env: NAME}`` (at any depth) is the environment variable ``NAME``'s value, held as a
:class:`~steadyrl.secrets.Secret` (redacted in every ``repr``) and revealed only when the function
is called (:class:`BoundReward`); a built-in gets it revealed, except the options it sends as
they are (:data:`SENDS_SECRETS`). Whether it is called the steadyrl way (positionally) or the TRL way
(by keyword) is read from its signature (:mod:`steadyrl.rewards.calling`); the call is checked
here with placeholders, and the columns it cannot run without become its ``reads_columns``.
``call_style="trl"`` calls a user function TRL's way whatever its signature (the dry call before
step 1 chooses it for a TRL function that fails on text: :func:`steadyrl.rewards.scorer.dry_call`).

Anything that goes wrong raises :class:`~steadyrl.errors.RewardLoadError` naming the spec (the
trainer adds which ``rewards[i]`` entry it is). The URLs of the built-ins that call a server
(:data:`URL_OPTIONS`) are also checked when the config is read (:func:`url_option_problems`).
"""

from __future__ import annotations

import difflib
import functools
import inspect
from pathlib import Path

from ..secrets import resolve_env_options, reveal
from ..errors import RewardLoadError
from ..userfn import SPEC_FORMS, is_file_target, resolve_spec
from . import code, judge, math_verifier, remote, reward_model, verifiers  # noqa: F401  (registers the built-ins)
from .calling import CALL_STYLE_ATTR, TRL_NOT_PASSED, call_error, describe_call, needs_trl_only, plan_call
from ..reward_specs import URL_OPTIONS, reward_name, url_option_problems  # noqa: F401 - re-exported
from .registry import BUILTIN_REWARDS, RewardFn

__all__ = ["BoundReward", "load_reward", "reward_name", "url_option_problems", "URL_OPTIONS", "SENDS_SECRETS"]

SENDS_SECRETS = {"http": ("headers",)}
"""Options of built-ins that keep :class:`~steadyrl.secrets.Secret` values and reveal them only in
the request they send (:func:`~steadyrl.rewards.http_client.post_json`)."""


class BoundReward(functools.partial):
    """A user function with its options: ``functools.partial`` whose options' secrets are
    revealed at each call only (its ``repr``, like a :class:`~steadyrl.secrets.Secret`'s, shows
    ``<redacted>``)."""

    def __call__(self, /, *args, **kwargs):
        return self.func(*self.args, *args, **{**reveal(self.keywords), **kwargs})


def _err(spec: str, what: str) -> RewardLoadError:
    return RewardLoadError(f"reward {spec!r}: {what}")


def _builtin(name: str, options: dict) -> RewardFn:
    """Built-in ``name`` with its options checked by its typed model
    (:mod:`steadyrl.config.reward_options`), the ``{env: NAME}`` values now read."""
    from ..config.reward_options import validated_options  # steadyrl.config imports this module

    try:
        validated_options(name, reveal(options))
    except ValueError as err:
        raise _err(name, str(err)) from None
    keep = SENDS_SECRETS.get(name, ())
    return BUILTIN_REWARDS[name](**{k: v if k in keep else reveal(v) for k, v in options.items()})


def _unknown_name(spec: str) -> RewardLoadError:
    names = sorted(BUILTIN_REWARDS)
    close = difflib.get_close_matches(spec, names, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return _err(
        spec,
        f"not a built-in reward; {hint}built-ins: {names}; "
        f"a function of your own is {SPEC_FORMS}",
    )


def _check_signature(spec: str, bound) -> tuple[str, ...]:
    """Check ``bound`` (the function with its options) can take the call its plan makes; returns
    the dataset columns it requires (parameters without a default that nothing else fills)."""
    try:
        inspect.signature(bound)
    except (TypeError, ValueError):  # options the function has no parameter for
        try:
            sig = inspect.signature(bound.func)
        except (TypeError, ValueError):
            return ()  # no introspectable signature (some C callables): trust it
        unknown = sorted(set(bound.keywords) - set(sig.parameters))
        raise _err(spec, f"option(s) {unknown or sorted(bound.keywords)} are not parameters of the function, "
                         f"which has no **kwargs; its signature is {sig}") from None
    trl_only = needs_trl_only(bound)
    if trl_only:  # not a data column: say so, rather than "the data has no column 'trainer_state'"
        what = "; ".join(f"{name!r} is {TRL_NOT_PASSED[name]}" for name in trl_only)
        raise _err(spec, f"needs {', '.join(map(repr, trl_only))}, which TRL's GRPOTrainer passes and steadyrl does "
                         f"not ({what}). Give it a default ({trl_only[0]}=None) and steadyrl calls the function "
                         "without it; log a number with a metrics() method instead (docs/rewards.md)")
    plan = plan_call(bound)
    # the columns arrive only at call time: bind placeholders (and token ids when it takes them)
    columns = {c: [] for c in plan.columns} | ({"completion_ids": []} if plan.takes_ids else {})
    why = call_error(bound, [], [], columns)
    if why is not None:
        raise _err(spec, f"cannot be called as {describe_call(bound, [], [], columns)}: {why}; signature "
                         f"{inspect.signature(bound)} (see docs/rewards.md, 'How a function is called')")
    return plan.columns


def load_reward(spec: str, *, call_style: str | None = None, **options) -> RewardFn:
    """The reward function named by ``spec`` (see the module docstring)."""
    if not isinstance(spec, str) or not spec.strip():
        raise RewardLoadError(f"reward spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    try:
        options = resolve_env_options(options, f"reward {spec!r}")
    except ValueError as err:
        raise RewardLoadError(str(err)) from None
    if spec in BUILTIN_REWARDS:
        return _with_recipe(_builtin(spec, options), spec, options)
    if ":" not in spec:
        raise _unknown_name(spec)
    fn = resolve_spec(spec, functools.partial(_err, spec))
    if not callable(fn):
        attr = spec.rsplit(":", 1)[1]
        raise _err(spec, f"{attr!r} is a {type(fn).__name__}, not a callable")
    bound = BoundReward(fn, **options)
    if call_style is not None:
        if call_style != "trl":
            raise _err(spec, f"call_style={call_style!r}; valid: 'trl' or None (read from the signature)")
        setattr(bound, CALL_STYLE_ATTR, call_style)
    columns = _check_signature(spec, bound)
    # the columns it cannot run without, checked against the data before the run starts
    bound.reads_columns = tuple(getattr(fn, "reads_columns", columns))
    return _with_recipe(bound, spec, options if call_style is None else {**options, "call_style": call_style})


RECIPE_ATTR = "steadyrl_recipe"
"""The attribute :func:`load_reward` leaves on what it returns: ``(spec, options)`` with the options
resolved, all a fresh worker needs to load the same function again (:func:`reload_reward`)."""


def _with_recipe(fn, spec: str, options: dict):
    try:
        setattr(fn, RECIPE_ATTR, (spec, dict(options)))
    except (AttributeError, TypeError):  # an object that takes no attributes: it is forked, not rebuilt
        pass
    return fn


def reload_reward(spec: str, options: dict):
    """In a fresh worker: the function :func:`load_reward` returned in the trainer for ``spec`` and
    ``options`` (already resolved: no ``{env: NAME}`` is read here)."""
    return load_reward(spec, **options)


def absolute_file_spec(spec: str) -> str:
    """``path/to/file.py:function`` with the file's absolute path (relative paths are read from the
    current directory, so a run's saved config must not depend on where it was launched); any
    other spec (a built-in, ``package.module:function``) unchanged."""
    target, sep, attr = spec.strip().rpartition(":")
    if not (sep and target and attr) or spec.strip() in BUILTIN_REWARDS:
        return spec
    if not is_file_target(target):
        return spec
    return f"{Path(target).expanduser().resolve()}:{attr}"
