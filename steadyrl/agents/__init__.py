"""What a multi-turn rollout needs below the episode driver: tools, tool-call parsers, chat templates.

* ``tools``: user functions the policy may call, their JSON schemas, argument checks;
* ``parsers``: a policy turn's text -> tool calls (``hermes``, ``llama3_json``, or the user's own);
* ``chat``: the observation tokens appended after a sampled turn, and the start-up template probe.

This package sits below ``rollout/``: it imports ``errors``, ``userfn`` and ``transformers`` only.
"""

from .chat import TemplateDriftError, TemplateError, check_template, observation_ids, render
from .parsers import TOOL_PARSERS, ParsedTurn, ToolCall, load_parser, register_parser
from .tools import Tool, ToolArgumentError, load_tools, run_tool, tool_schemas, tools_by_name

__all__ = [
    "TemplateDriftError", "TemplateError", "check_template", "observation_ids", "render",
    "TOOL_PARSERS", "ParsedTurn", "ToolCall", "load_parser", "register_parser",
    "Tool", "ToolArgumentError", "load_tools", "run_tool", "tool_schemas", "tools_by_name",
]
