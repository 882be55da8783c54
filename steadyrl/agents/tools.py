"""Tools: user functions the policy may call during a rollout, with the JSON schema it is shown.

``rollout.multi_turn.tools`` lists ``file.py:fn`` / ``package.module:fn`` specs. Each function needs a type
hint on every argument and a Google-style docstring describing it (the schema the chat template
shows the model is built from them by ``transformers.utils.get_json_schema``)::

    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.

        Args:
            a: the first addend
            b: the second addend
        \"\"\"
        return a + b

``run_tool`` checks the arguments the model wrote against that schema (unknown, missing, wrong
JSON type, not one of an enum's values) and raises ``ToolArgumentError`` with a message for the
model; then it calls the function and returns its result as text (``str`` as is, anything else
as JSON). The function's own exceptions propagate: the caller runs it under a time limit in an
isolated worker and shows the error to the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable

from ..errors import ConfigError, SteadyRLError
from ..userfn import SPEC_FORMS, resolve_spec

__all__ = ["Tool", "ToolArgumentError", "load_tools", "run_tool", "tools_by_name", "tool_schemas",
           "PARSE_ERROR", "UNKNOWN_TOOL", "MAX_CALLS", "TIME_BUDGET"]

PARSE_ERROR = "parse"
"""The name malformed tool calls are counted under (``rollout/tool_errors/parse``)."""

UNKNOWN_TOOL = "unknown"
"""The name calls to a tool that does not exist are counted under (``rollout/tool_errors/unknown``),
whatever name the model wrote: the metric keys stay the tools' names and these two."""

MAX_CALLS = "max_calls"
"""The name calls past ``rollout.multi_turn.max_tool_calls_per_turn`` are counted under (not run)."""

TIME_BUDGET = "time_budget"
"""The name calls cut or not run because their turn's ``rollout.multi_turn.tool_time_budget_s`` was spent are
counted under."""

_RESERVED = {PARSE_ERROR: "malformed tool calls", UNKNOWN_TOOL: "calls to tools that do not exist",
             MAX_CALLS: "calls past rollout.multi_turn.max_tool_calls_per_turn",
             TIME_BUDGET: "calls past their turn's rollout.multi_turn.tool_time_budget_s"}


class ToolArgumentError(SteadyRLError, ValueError):
    """The model called a tool with arguments its schema refuses; the message is shown to the model."""


@dataclass(frozen=True)
class Tool:
    """A callable the policy may use, its name and its OpenAI-style function schema; ``spec`` the
    ``file.py:fn`` / ``module:fn`` it was loaded from (a fresh sandbox worker loads it again from
    there; a tool without one is a Python object only, and its worker is forked from the trainer)."""

    name: str
    fn: Callable
    schema: dict
    spec: str | None = None


def _schema(fn, err) -> dict:
    from transformers.utils import get_json_schema
    from transformers.utils.chat_template_utils import DocstringParsingException, TypeHintParsingException

    try:
        return get_json_schema(fn)
    except (DocstringParsingException, TypeHintParsingException) as error:
        raise err(
            f"cannot build the tool's JSON schema: {error} (a tool needs a type hint on every argument "
            "and a docstring with a description and an 'Args:' section describing each argument)"
        ) from None
    except Exception as error:  # noqa: BLE001 - partials, builtins without a signature ...
        raise err(f"cannot build the tool's JSON schema: {type(error).__name__}: {error} "
                  "(a tool is a plain Python function with type hints and a docstring)") from None


def load_tools(specs: list[str]) -> list[Tool]:
    """The tools ``rollout.multi_turn.tools`` names, in order (see the module docstring)."""
    if isinstance(specs, str) or not isinstance(specs, (list, tuple)):
        raise ConfigError(f"rollout.multi_turn.tools={specs!r}: expected a list of {SPEC_FORMS} specs")
    tools: list[Tool] = []
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        def err(what: str, i=i, spec=spec) -> ConfigError:
            return ConfigError(f"rollout.multi_turn.tools[{i}]={spec!r}: {what}")

        if not isinstance(spec, str) or ":" not in spec:
            raise err(f"expected {SPEC_FORMS}")
        fn = resolve_spec(spec.strip(), err)
        if not callable(fn):
            raise err(f"{spec.rsplit(':', 1)[1]!r} is a {type(fn).__name__}, not a callable")
        schema = _schema(fn, err)
        name = schema["function"]["name"]
        if name in _RESERVED:
            raise err(f"the function is named {name!r}, the name rollout/tool_errors/{name} counts "
                      f"{_RESERVED[name]} under; rename the function")
        if name in seen:
            raise err(f"a second tool named {name!r} (rollout.multi_turn.tools[{seen[name]}] has that name); "
                      "the model calls tools by name, so names must be unique")
        seen[name] = i
        tools.append(Tool(name=name, fn=fn, schema=schema, spec=spec.strip()))
    return tools


class ToolServer:
    """A fresh worker's target: the tools loaded again from their specs, serving ``(name, arguments)``
    calls with :func:`run_tool`. Built by :func:`tool_server` from ``(spec, name, schema)`` rows."""

    def __init__(self, rows: list):
        def err(what: str) -> ConfigError:
            return ConfigError(f"a tool of the sandbox worker: {what}")

        self.tools = {name: Tool(name, resolve_spec(spec, err), schema, spec) for spec, name, schema in rows}

    def __call__(self, request) -> str:
        name, arguments = request
        return run_tool(self.tools[name], arguments)


def tool_server(rows: list) -> ToolServer:
    return ToolServer(rows)


def server_recipe(tools: Iterable[Tool]):
    """A :class:`~steadyrl.sandbox.Rebuild` of a :class:`ToolServer` for ``tools`` - what a fresh
    worker needs to load them again - or None when one of them has no spec (it is forked)."""
    from ..sandbox import Rebuild

    tools = list(tools)
    if any(t.spec is None for t in tools):
        return None
    return Rebuild(tool_server, [(t.spec, t.name, t.schema) for t in tools])


def tools_by_name(tools: Iterable[Tool]) -> dict[str, Tool]:
    """``{tool.name: tool}``."""
    return {tool.name: tool for tool in tools}


def tool_schemas(tools: Iterable[Tool]) -> list[dict]:
    """The schemas to pass as ``tools=`` to the chat template."""
    return [tool.schema for tool in tools]


_JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _type_problem(value, schema: dict, where: str) -> str | None:
    """Why ``value`` does not fit ``schema`` (types, enums, array items, nullable), or None."""
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {schema['enum']}, got {json.dumps(value, default=str)}"
    types = schema.get("type")
    if types is None:
        return None
    types = [types] if isinstance(types, str) else list(types)
    if schema.get("nullable"):
        types.append("null")
    if not any(_JSON_TYPES.get(t, lambda v: True)(value) for t in types):
        shown = json.dumps(value, default=str)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return f"{where} must be of type {' or '.join(types)}, got {shown}"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for k, item in enumerate(value):
            problem = _type_problem(item, schema["items"], f"{where}[{k}]")
            if problem:
                return problem
    return None


def check_arguments(tool: Tool, arguments) -> None:
    """Raise ``ToolArgumentError`` if ``arguments`` do not fit ``tool``'s schema."""
    params = tool.schema["function"].get("parameters", {})
    properties = params.get("properties", {})
    if not isinstance(arguments, dict):
        raise ToolArgumentError(
            f"tool {tool.name!r}: arguments must be a JSON object, got {type(arguments).__name__}")
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        raise ToolArgumentError(
            f"tool {tool.name!r}: unknown argument(s) {unknown}; its arguments are {sorted(properties)}")
    missing = [name for name in params.get("required", []) if name not in arguments]
    if missing:
        raise ToolArgumentError(f"tool {tool.name!r}: missing required argument(s) {missing}")
    for name, value in arguments.items():
        problem = _type_problem(value, properties[name], f"argument {name!r}")
        if problem:
            raise ToolArgumentError(f"tool {tool.name!r}: {problem}")


def run_tool(tool: Tool, arguments: dict) -> str | list:
    """``tool.fn(**arguments)`` as text, after checking the arguments (see the module docstring); a
    result that is an image or content parts as a list of parts (images as data URLs)."""
    check_arguments(tool, arguments)
    result = tool.fn(**arguments)
    if isinstance(result, str):
        return result
    from .images import json_content

    content = json_content(result)  # an image or content parts: a list of parts, images as data URLs
    return content if content is not result else json.dumps(result, default=str)
