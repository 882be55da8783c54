"""``steadyrl config show``'s check of ``rollout.multi_turn.tools`` / ``tool_parser`` / ``environment`` without
running them: a config may come from someone else, and loading a ``file.py:fn`` spec executes the
file (:func:`steadyrl.userfn.import_file`). Reading a config never runs its code.

What is checked, statically: each spec has the ``file.py:name`` / ``module:name`` form; a file
exists, parses as Python (``ast``, nothing executed) and defines ``name`` at its top level (a
``def``, a ``class``, an assignment or an import); a module name is a dotted identifier; a
parser name without ``:`` is a built-in one. What only loading can tell (a tool's JSON schema, a
parser's signature, an environment's methods) is checked by ``train`` / ``eval`` when they load
them, and by ``config show --trust-run-code``
(:func:`steadyrl.assembly.agent.check_agent_specs`).
"""

from __future__ import annotations

import ast
from pathlib import Path

from ..errors import ConfigError
from ..userfn import SPEC_FORMS, is_file_target

__all__ = ["check_specs_statically", "defined_names"]

MAX_SOURCE_BYTES = 8 << 20
"""A file larger than this is not parsed (a tool file is a few kilobytes)."""


def defined_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (conditional branches and try blocks included)."""
    names: set[str] = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With)) or type(node).__name__ == "TryStar":
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, field, []):
                    todo.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])
    return names


def check_spec(spec: object, err) -> None:
    """:class:`ConfigError` (through ``err``) when ``spec`` cannot name an object; nothing is imported."""
    if not isinstance(spec, str) or ":" not in spec:
        raise err(f"expected {SPEC_FORMS}")
    target, attr = spec.strip().rsplit(":", 1)
    if not target or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise err(f"expected {SPEC_FORMS}")
    if not is_file_target(target):
        if not all(p.isidentifier() for p in target.split(".")):
            raise err(f"{target!r} is not a module name; expected {SPEC_FORMS}")
        return  # a module is found only by importing it: checked when it is loaded
    path = Path(target).expanduser()
    if not path.is_file():
        raise err(f"file {str(path.resolve())!r} does not exist")
    if path.stat().st_size > MAX_SOURCE_BYTES:
        return
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise err(f"{str(path)!r} is not valid Python ({type(error).__name__}: {error})") from None
    first = attr.split(".")[0]
    if first not in defined_names(tree):
        raise err(f"{target!r} has no attribute {first!r} (read without running it)")


def check_specs_statically(config) -> None:
    """The specs of ``config.rollout`` checked without importing or running them (module docstring)."""
    mt = config.rollout.multi_turn
    if mt.tools:
        if isinstance(mt.tools, str) or not isinstance(mt.tools, (list, tuple)):
            raise ConfigError(f"rollout.multi_turn.tools={mt.tools!r}: expected a list of {SPEC_FORMS} specs")
        for i, spec in enumerate(mt.tools):
            check_spec(spec, lambda what, i=i, spec=spec: ConfigError(f"rollout.multi_turn.tools[{i}]={spec!r}: {what}"))
        parser = mt.tool_parser
        if ":" in str(parser):
            check_spec(parser, lambda what: ConfigError(f"rollout.multi_turn.tool_parser = {parser!r}: {what}"))
        else:
            from .parsers import load_parser  # a built-in name: steadyrl's own parsers, no user code

            load_parser(parser)
    elif mt.environment is not None:
        from ..envs import is_spec

        if not is_spec(mt.environment):
            env = mt.environment
            check_spec(env, lambda what: ConfigError(f"rollout.multi_turn.environment = {env!r}: {what}; valid: "
                                                     f"{SPEC_FORMS.replace('function', 'Class')}"))
