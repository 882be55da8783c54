"""Tool use: the agent that runs the tool calls a turn makes and returns their results.

A turn is parsed by ``rollout.multi_turn.tool_parser`` (:mod:`.parsers`). No call and no malformed call: the
policy has answered and the episode ends. Otherwise every call of every running episode runs at
once (:class:`.calls.CallRunner`, under ``rollout.multi_turn.tool_isolation`` and
``rollout.multi_turn.tool_timeout_s``) and
each result comes back as a ``tool`` message, in the order of the calls. A call that raises, times
out, names an unknown tool or passes bad arguments returns its error text to the model (it can
recover) and is counted by tool name; a malformed call is counted as ``parse``, a call to a tool
that does not exist as ``unknown`` (not under the name the model made up: the metric keys stay
bounded).

Two bounds keep a turn that calls tools in a loop (a repetition, or a policy that learnt that
calls cost nothing) from holding the step: only the first ``rollout.multi_turn.max_tool_calls_per_turn``
calls of a turn are run, each further one is answered ``Error: ...`` and counted as
``max_calls``; and all the calls of a turn share ``rollout.multi_turn.tool_time_budget_s``, counted from when
they are sent: a call still running when it is spent is cut, one not started yet is not run,
both answered with an error and counted as ``time_budget``. The turns of all episodes are sent
together, first calls first (every episode's first call, then every second call ...), so that
one episode's many calls do not keep another's first one waiting.

Arguments nested more than :data:`MAX_ARGUMENT_DEPTH` levels deep (a degenerate
repetition of ``[[[[...``), or that cannot be pickled to a worker, make a malformed call too.

Under ``process`` isolation, tools loaded from specs (``rollout.multi_turn.tools``) run in fresh workers that
load them again (:func:`.tools.server_recipe`); tools given as Python objects, in forked ones.
"""

from __future__ import annotations

import pickle

from .calls import CallResult, CallRunner, error_text
from .messages import assistant_message, tool_message
from .protocol import AgentBase, Reply, Start
from .tools import MAX_CALLS, PARSE_ERROR, TIME_BUDGET, UNKNOWN_TOOL, server_recipe

MAX_ARGUMENT_DEPTH = 100
"""Deepest nesting of lists and objects a tool call's arguments may have."""


def _depth(value, limit: int) -> int:
    """How deeply ``value`` nests lists, tuples and dicts, counted up to ``limit + 1`` (iterative:
    no recursion limit to hit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            deepest = max(deepest, level)
            if level > limit:
                return level
            stack.extend((x, level + 1) for x in (item.values() if isinstance(item, dict) else item))
    return deepest


def argument_problem(arguments) -> str | None:
    """Why a call's arguments cannot be run (too deep, not picklable), or None."""
    if _depth(arguments, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
        return f"the tool call's arguments are nested more than {MAX_ARGUMENT_DEPTH} levels deep"
    try:
        pickle.dumps(arguments, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # noqa: BLE001 - RecursionError, an object a user parser made ...
        return f"the tool call's arguments cannot be sent to the tool ({type(err).__name__})"
    return None


DEFAULT_MAX_CALLS = 8
"""``rollout.multi_turn.max_tool_calls_per_turn``'s default: one wave of the default 8 tool workers."""
DEFAULT_TIME_BUDGET_S = 60.0
"""``rollout.multi_turn.tool_time_budget_s``'s default: two calls' worth of the default 30 s time limit."""


class ToolAgent(AgentBase):
    observation_role = "tool"

    def __init__(self, tools: list, parser, *, timeout_s: float, isolation: str, limits=None, workers: int = 8,
                 max_calls_per_turn: int | None = DEFAULT_MAX_CALLS,
                 time_budget_s: float | None = DEFAULT_TIME_BUDGET_S):
        from .tools import tools_by_name

        self.tools = tools_by_name(tools)
        self.tool_schemas = [t.schema for t in tools]
        self.parser = parser
        self.timeout_s = timeout_s
        self.max_calls_per_turn, self.time_budget_s = max_calls_per_turn, time_budget_s
        self.template_kwargs: dict = {}
        self.id_style = "alnum9"  # call ids the parser does not read from the turn (see .messages)
        self.structured_calls = True  # False: the template shows no tool_calls (.messages.renders_tool_calls)
        self.isolation = isolation
        self.runner = CallRunner(self._run, isolation, workers=workers, limits=limits,
                                 fresh_target=server_recipe(tools))

    def _run(self, request: tuple[str, dict]) -> str:
        """One call, ``(tool name, arguments)``: in the sandbox worker under process isolation."""
        from .tools import run_tool

        name, arguments = request
        return run_tool(self.tools[name], arguments)

    def start(self, rows: list[dict], seeds: list[int]) -> list[Start]:
        return [Start(state={"calls": 0}) for _ in rows]  # the episode's call count numbers its call ids

    def _parse(self, text: str):
        from .parsers import ParsedTurn

        try:
            turn = self.parser(text)
        except Exception as err:  # a user parser that fails: the turn is a malformed call
            return ParsedTurn(content=text, calls=[], errors=[f"the tool call could not be read: {error_text(err)}"])
        problems = [argument_problem(call.arguments) for call in turn.calls]
        if not any(problems):
            return turn
        return ParsedTurn(content=turn.content, calls=[c for c, p in zip(turn.calls, problems) if p is None],
                          errors=list(turn.errors) + [p for p in problems if p is not None])

    def respond(self, states: list, texts: list[str], last: list[bool] | None = None) -> list[Reply]:
        """``last[i]``: episode ``i`` has used its last turn, so its calls are not run (their results
        could never be read); its reply only says whether the policy answered (done) or not."""
        parsed = [self._parse(t) for t in texts]
        last = last or [False] * len(texts)
        replies = self._run_turns([None if end else turn for turn, end in zip(parsed, last)])
        replies = [Reply(done=not turn.calls and not turn.errors) if reply is None else reply
                   for turn, reply in zip(parsed, replies)]
        for state, text, turn, reply in zip(states, texts, parsed, replies):
            first = state["calls"] if isinstance(state, dict) else 0
            reply.assistant = (assistant_message(text, turn, first_index=first, style=self.id_style)
                               if self.structured_calls else {"role": "assistant", "content": text})
            ids = [c["id"] for c in reply.assistant.get("tool_calls", [])]
            for message in reply.messages:  # results answer the calls in order
                if message["name"] != PARSE_ERROR and ids:
                    message["tool_call_id"] = ids.pop(0)
            if isinstance(state, dict):
                state["calls"] = first + len(turn.calls)
        return replies

    def _results(self, parsed: list) -> dict[tuple[int, int], CallResult]:
        """Run the calls to be run, first calls of every turn first; ``(turn, call) -> result``."""
        cap = self.max_calls_per_turn
        keys = sorted(((i, k) for i, turn in enumerate(parsed) if turn is not None
                       for k, call in enumerate(turn.calls[:cap]) if call.name in self.tools),
                      key=lambda ik: (ik[1], ik[0]))
        requests = [(parsed[i].calls[k].name, parsed[i].calls[k].arguments) for i, k in keys]
        return dict(zip(keys, self.runner.map(requests, self.timeout_s, budget_s=self.time_budget_s)))

    def _result(self, results: dict, i: int, k: int, call) -> CallResult:
        if self.max_calls_per_turn is None or k < self.max_calls_per_turn:
            return results.get((i, k)) or CallResult(
                "error", f"unknown tool {call.name!r}; tools: {sorted(self.tools)}", 0.0)
        return CallResult("max_calls", f"not run: a turn may make at most {self.max_calls_per_turn} tool calls "
                          f"(rollout.multi_turn.max_tool_calls_per_turn), this is call {k + 1}", 0.0)

    def _run_turns(self, parsed: list) -> list[Reply]:
        """Run the calls of every parsed turn (None: nothing to run) and build the replies."""
        results = self._results(parsed)
        replies = []
        for i, turn in enumerate(parsed):
            if turn is None:
                replies.append(None)
                continue
            reply = Reply(done=not turn.calls and not turn.errors, tool_calls=len(turn.calls))
            for message in turn.errors:
                reply.messages.append(tool_message(PARSE_ERROR, f"Error: {message}"))
                reply.tool_errors[PARSE_ERROR] = reply.tool_errors.get(PARSE_ERROR, 0) + 1
            for k, call in enumerate(turn.calls):
                result = self._result(results, i, k, call)
                reply.elapsed_s = max(reply.elapsed_s, result.elapsed_s)
                if result.ok:
                    value = result.value  # text, or content parts (a tool's image: .images)
                    reply.messages.append(tool_message(call.name, value if isinstance(value, list) else str(value)))
                    continue
                reply.messages.append(tool_message(call.name, f"Error: {result.value}"))
                counted = {"max_calls": MAX_CALLS, "budget": TIME_BUDGET}.get(result.status) or \
                    (call.name if call.name in self.tools else UNKNOWN_TOOL)
                reply.tool_errors[counted] = reply.tool_errors.get(counted, 0) + 1
            replies.append(reply)
        return replies

    def close(self, states: list) -> None:
        pass

    def shutdown(self) -> None:
        """At the end of the run: the sandbox workers go."""
        self.runner.close()
