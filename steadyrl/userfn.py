"""Importing a user's callable from a ``module:attr`` spec (shared by rewards, tools and parsers).

A spec names an object in one of two ways:

* ``package.module:name``: imported with :func:`importlib.import_module` (so the package must be on
  ``sys.path`` / ``PYTHONPATH``);
* ``path/to/file.py:name``: the file is executed as a module (relative to the current directory,
  or absolute); its folder is *not* put on ``sys.path``. A file is executed once per process,
  whatever loads it (a reward and a tool from one file share its module-level state).

``name`` may be dotted (``module:Class.method``). Every failure is raised through the caller's
``err(what) -> Exception``, so each caller names its own config field in the message.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Callable

__all__ = ["resolve_spec", "import_file", "import_module", "get_attribute", "SPEC_FORMS"]

SPEC_FORMS = "'package.module:function' or 'path/to/file.py:function'"

ErrFn = Callable[[str], Exception]


def import_file(target: str, err: ErrFn, *, prefix: str = "_steadyrl_user"):
    """The module obtained by executing the Python file ``target`` (cached in ``sys.modules``)."""
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise err(f"file {str(path)!r} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"{prefix}_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise err(f"{str(path)!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # so classes and pickling inside it find their module
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:
        del sys.modules[module_name]
        raise err(f"running {str(path)!r} raised {type(error).__name__}: {error}") from error
    return module


def import_module(target: str, err: ErrFn):
    """``importlib.import_module(target)``, its failures reworded through ``err``."""
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as error:
        if error.name and (target == error.name or target.startswith(error.name + ".")):
            raise err(
                f"no module named {error.name!r} (is it on sys.path / PYTHONPATH? "
                "a file is given as 'path/to/file.py:function')"
            ) from error
        raise err(f"importing {target!r} raised ModuleNotFoundError: {error}") from error
    except (Exception, SystemExit) as error:
        raise err(f"importing {target!r} raised {type(error).__name__}: {error}") from error


def get_attribute(module, attr: str, shown: str, err: ErrFn):
    """``module.attr`` (dotted); ``shown`` names the module in errors (the file or module the user wrote)."""
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None)))
            close = difflib.get_close_matches(part, public, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else f"; callables defined there: {public[:20]}"
            owner = shown if obj is module else getattr(obj, "__name__", obj)
            raise err(f"{owner!r} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
    return obj


def is_file_target(target: str) -> bool:
    """Whether the part before ``:`` names a file rather than a module."""
    return target.endswith(".py") or "/" in target or "\\" in target


def resolve_spec(spec: str, err: ErrFn, *, prefix: str = "_steadyrl_user"):
    """The object ``spec`` (``module:attr`` or ``file.py:attr``) names. Not checked to be callable."""
    if ":" not in spec:
        raise err(f"expected {SPEC_FORMS}")
    target, attr = spec.rsplit(":", 1)  # rsplit: a Windows path has a drive colon
    if not target or not attr:
        raise err(f"expected {SPEC_FORMS}")
    if is_file_target(target):
        module = import_file(target, err, prefix=prefix)
    else:
        module = import_module(target, err)
    return get_attribute(module, attr, target, err)
