"""Tool use: the agent that runs the tool calls a turn makes and returns their results.

A turn is parsed by ``rollout.tool_parser`` (:mod:`.parsers`). No call and no malformed call: the
policy has answered and the episode ends. Otherwise every call of every running episode runs at
once (:func:`.calls.run_calls`, under ``rollout.tool_isolation`` and ``rollout.tool_timeout_s``) and
each result comes back as a ``tool`` message, in the order of the calls. A call that raises, times
out, names an unknown tool or passes bad arguments returns its error text to the model (it can
recover) and is counted by tool name; a malformed call is counted as ``parse``.
"""

from __future__ import annotations

from .calls import CallResult, error_text, run_calls
from .protocol import Reply, Start

PARSE_ERROR = "parse"
"""The name malformed tool calls are counted under (``rollout/tool_errors/parse``)."""


def tool_message(name: str, content: str) -> dict:
    return {"role": "tool", "name": name, "content": content}


class ToolAgent:
    observation_role = "tool"

    def __init__(self, tools: list, parser, *, timeout_s: float, isolation: str):
        from .tools import tools_by_name

        self.tools = tools_by_name(tools)
        self.tool_schemas = [t.schema for t in tools]
        self.parser = parser
        self.timeout_s = timeout_s
        self.template_kwargs: dict = {}
        self.isolation = isolation

    def start(self, rows: list[dict], seeds: list[int]) -> list[Start]:
        return [Start() for _ in rows]

    def _parse(self, text: str):
        from .parsers import ParsedTurn

        try:
            return self.parser(text)
        except Exception as err:  # a user parser that fails: the turn is a malformed call
            return ParsedTurn(content=text, calls=[], errors=[f"the tool call could not be read: {error_text(err)}"])

    def respond(self, states: list, texts: list[str]) -> list[Reply]:
        from .tools import run_tool

        parsed = [self._parse(t) for t in texts]
        thunks, owners = [], []
        for i, turn in enumerate(parsed):
            for call in turn.calls:
                tool = self.tools.get(call.name)
                if tool is not None:
                    thunks.append(lambda tool=tool, args=call.arguments: run_tool(tool, args))
                    owners.append((i, call.name))
        results = iter(run_calls(thunks, self.timeout_s, self.isolation))
        replies = []
        for i, turn in enumerate(parsed):
            reply = Reply(done=not turn.calls and not turn.errors, tool_calls=len(turn.calls))
            for message in turn.errors:
                reply.messages.append(tool_message(PARSE_ERROR, f"Error: {message}"))
                reply.tool_errors[PARSE_ERROR] = reply.tool_errors.get(PARSE_ERROR, 0) + 1
            for call in turn.calls:
                result = (next(results) if call.name in self.tools else
                          CallResult("error", f"unknown tool {call.name!r}; tools: {sorted(self.tools)}", 0.0))
                reply.elapsed_s = max(reply.elapsed_s, result.elapsed_s)
                if result.ok:
                    reply.messages.append(tool_message(call.name, str(result.value)))
                else:
                    reply.messages.append(tool_message(call.name, f"Error: {result.value}"))
                    reply.tool_errors[call.name] = reply.tool_errors.get(call.name, 0) + 1
            replies.append(reply)
        return replies

    def close(self, states: list) -> None:
        pass
