"""One conformance case: a real chat template in one mode, judged three ways (shared by the test
and tools/template_table.py, which prints the table in docs/agents.md).

* ``verdict``: what the start-up probe says (``check_mode`` with the family's stop tokens and
  the parser ``tool_parser: auto`` picks for the template): ``exact`` or the refusal's message;
* ``episode``: a scripted episode run through the real rollout (``run_episodes``, a scripted
  engine that samples what the template shows the model writing, the real ``ToolAgent``), its
  token ids compared with the tokenized ``apply_chat_template`` of the whole conversation as the
  ground truth holds it (an OpenAI-style server with a reasoning parser: ``reasoning_content``,
  ``content``, ``tool_calls`` with ids; not steadyrl's own messages, so a turn steadyrl keeps
  otherwise shows): ``exact``, ``differs at token N`` or ``failed: why``;
* ``round_trip``: the call text the template renders parses back to the call (tools mode).

Each case runs in one ``rollout.multi_turn.mode`` (``TURN_MODES``), the probe and the episode judged
in that mode's own terms: ``single`` against the whole conversation's rendering; ``stepwise`` each
turn's sample is the tokenized rendering of the conversation before it (with a generation prompt)
plus the ids sampled; ``as_sampled`` the contexts the engine was given are prefixes of the trained
sequence and every observation is the template's rendering of the conversation's end after the
turn's end token (tokenized as it is).
"""

from __future__ import annotations

import contextlib
import datetime
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from steadyrl.agents.chat import HISTORY_CLOSERS, TemplateError, observation_overhead, render
from steadyrl.agents.formats import parser_for_template
from steadyrl.agents.messages import assistant_message, text_message, tool_message
from steadyrl.agents.parsers import TOOL_PARSERS
from steadyrl.agents.modes import check_mode, model_turn
from steadyrl.agents.probe import sampled_turn
from steadyrl.agents.templating import thinks as _thinks
from steadyrl.agents.protocol import AgentBase, Reply, Start
from steadyrl.agents.toolagent import ToolAgent
from steadyrl.agents.tools import Tool
from steadyrl.agents.turns import call_form, shape_turn, written_turn
from steadyrl.rollout.base import Generation
from steadyrl.rollout.episodes import TurnLimits, run_episodes

MODES = ("tools", "user")
TURN_MODES = ("single", "stepwise", "as_sampled")
PROMPT = [{"role": "user", "content": "What is 1 + 2 + 4?"}]
LIMITS = TurnLimits(max_turns=4, max_new_tokens=4000, max_observation_tokens=4000, observation_truncation="right",
                    episode_tokens=100000)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


def add_tool() -> Tool:
    from transformers.utils import get_json_schema

    return Tool(name="add", fn=add, schema=get_json_schema(add))


def _plan(mode: str) -> list[tuple[dict, list[dict]]]:
    """(assistant message, what follows) per turn; tool results are filled in by the real tool."""
    if mode == "user":
        return [({"role": "assistant", "content": "8"}, [{"role": "user", "content": "Wrong, try again."}]),
                ({"role": "assistant", "content": "7"}, [{"role": "user", "content": "Correct."}]),
                ({"role": "assistant", "content": "Done."}, [])]

    def call(a, b):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "", "type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}}]}
    return [(call(1, 2), [tool_message("add", "3")]), (call(3, 4), [tool_message("add", "7")]),
            ({"role": "assistant", "content": "The answer is 7."}, [])]


def script(tok, mode: str, tools, ends, kwargs, parser, turn_mode: str = "single", before=None):
    """``(turn texts with their end text, the whole conversation)``: each turn is what the template
    renders for the model's message (its reasoning in the template's field, its calls' arguments in
    the form the template renders), and the conversation is the ground truth, as an OpenAI-style
    server with a reasoning parser holds it (``reasoning_content``, ``content``, ``tool_calls`` with
    ids and string arguments where the template reads them), not steadyrl's reading of the turns.
    ``before`` (a list) gets the ground truth's conversation before each turn."""
    conv, truth, turns, calls = list(PROMPT), list(PROMPT), [], 0
    write = sampled_turn if turn_mode == "single" else model_turn
    think = _thinks(tok, render(tok, conv, tools=tools, add_generation_prompt=True, template_kwargs=kwargs)[-40:])
    for i, (message, new) in enumerate(_plan(mode)):
        if message.get("tool_calls"):
            message = {**message, "tool_calls": [{**message["tool_calls"][0], "id": f"call{calls:05d}"}]}
            message = call_form(tok, truth, message, tools=tools, template_kwargs=kwargs)
            new = [{**new[0], "tool_call_id": f"call{calls:05d}"}]
        if before is not None:
            before.append(list(truth))
        text, end = write(tok, truth, message, new, tools=tools, end_texts=ends, kwargs=kwargs, think=think, i=i)
        turns.append((text, end))
        kept = (assistant_message(text, parser(text), first_index=calls, style="alnum9") if message.get("tool_calls")
                else text_message(text, tok.chat_template))
        kept = shape_turn(tok, conv, text, kept, tools=tools, template_kwargs=kwargs, end=end)
        if kept.get("tool_calls"):  # the ids the model wrote (Kimi-K2) are the ones its results answer
            new = [{**m, "tool_call_id": c["id"]} for m, c in zip(new, kept["tool_calls"])]
            message = {**message, "tool_calls": [{**c, "id": k["id"]} for c, k in zip(message["tool_calls"],
                                                                                      kept["tool_calls"])]}
        calls += len(kept.get("tool_calls", []))
        conv += [kept, *new]
        truth += [_truth(tok, truth, message, text, think, i, tools, kwargs), *new]
    return turns, truth


def _truth(tok, before: list[dict], message: dict, text: str, think: bool, i: int, tools, kwargs) -> dict:
    """The ground truth's assistant message: the text the model wrote as a server holds it
    (steadyrl.agents.server: a ``<think>`` family's reasoning parser splits at ``</think>``, nothing
    stripped; the tool parser's content is the text before the calls), the planned calls; Harmony's
    reasoning in ``thinking``, the field its template reads. Whitespace the template writes around
    the answer is not content (steadyrl.agents.turns.written_turn)."""
    if "<|channel|>analysis" in (tok.chat_template or ""):
        return {**message, "thinking": f"r{i}"} if think else message
    if "</think>" in (tok.chat_template or ""):  # with a reasoning parser or without one (SmolLM3: content as written)
        written = written_turn(tok, before, text, message.get("tool_calls"), tools=tools, template_kwargs=kwargs)
        return message if written is None else {**written, **({"tool_calls": message["tool_calls"]}
                                                              if message.get("tool_calls") else {})}
    return {**message, "reasoning_content": f"r{i}"} if think else message  # the field the template reads (Cohere2)


class TurnEngine:
    """Samples the scripted turns in order (one episode), each closed by its end token."""

    def __init__(self, tok, turns):
        self.tok, self.turns, self.k, self.contexts = tok, turns, 0, []
        self.eos_ids = sorted({tok.convert_tokens_to_ids(end) for _, end in turns} | {tok.eos_token_id})

    def generate(self, prompt_ids, n, *, max_new_tokens, **sampling):
        text, end = self.turns[min(self.k, len(self.turns) - 1)]
        self.k += 1
        self.contexts.append(list(prompt_ids[0]))
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.convert_tokens_to_ids(end)]
        return Generation(prompt_ids=torch.tensor(prompt_ids), prompt_mask=torch.ones(1, len(prompt_ids[0]),
                          dtype=torch.long), response_ids=torch.tensor([ids]), response_mask=torch.ones(1, len(ids),
                          dtype=torch.long), truncated=torch.tensor([False]), completions=[text])


class UserAgent(AgentBase):
    """An environment in the user's role: answers turn k with the plan's messages."""

    observation_role, tool_schemas = "user", None

    def __init__(self, kwargs):
        self.template_kwargs, self.k = kwargs or {}, 0

    def start(self, rows, seeds):
        return [Start() for _ in rows]

    def respond(self, states, texts, last=None):
        plan = _plan("user")
        new = plan[min(self.k, len(plan) - 1)][1]
        self.k += 1
        return [Reply(messages=[dict(m) for m in new], done=not new)]

    def close(self, states):
        pass


def episode(tok, mode: str, ends, kwargs, parser_name: str, turn_mode: str = "single") -> str:
    """The rollout's ids for the scripted episode against the template (module docstring)."""
    parser = TOOL_PARSERS[parser_name]
    tools = [add_tool()] if mode == "tools" else None
    schemas = [t.schema for t in tools] if tools else None
    before: list = []
    try:
        turns, conv = script(tok, mode, schemas, ends, kwargs, parser, turn_mode, before)
    except TemplateError as err:
        return f"failed: {err}"
    if tools:
        agent = ToolAgent(tools, parser, timeout_s=5.0, isolation="inline")
        agent.template_kwargs = kwargs or {}
    else:
        agent = UserAgent(kwargs)
    prompt_text = render(tok, PROMPT, tools=schemas, add_generation_prompt=True, template_kwargs=kwargs)
    prompt = SimpleNamespace(ids=tok(prompt_text, add_special_tokens=False)["input_ids"], columns={},
                             text=prompt_text, messages=PROMPT, conversation=PROMPT)
    agent.multi_turn_mode = turn_mode
    engine = TurnEngine(tok, turns)
    gen = run_episodes(engine, tok, [prompt], 1, agent=agent, limits=LIMITS)
    info = gen.episodes[0]
    if info.failed:
        return f"failed: {info.error}"
    if info.drift_tokens:
        return f"differs at token ?: rollout/retokenize_drift {info.drift_tokens}"
    if turn_mode == "stepwise":
        return _stepwise_exact(tok, info, before, prompt.ids, schemas, kwargs)
    if turn_mode == "as_sampled":
        return _as_sampled_exact(tok, gen, engine, turns, conv, prompt.ids, schemas, kwargs)
    ids = prompt.ids + gen.response_ids[0][gen.response_mask[0].bool()].tolist()
    whole = tok(render(tok, conv, tools=schemas, add_generation_prompt=False, template_kwargs=kwargs),
                add_special_tokens=False)["input_ids"]
    if whole[:len(ids)] == ids or whole == ids[:-1]:  # a template with no closer: the last stop is the model's
        return "exact"
    i = next((i for i, (a, b) in enumerate(zip(ids, whole)) if a != b), min(len(ids), len(whole)))
    return (f"differs at token {i}: episode {tok.decode(ids[max(0, i - 8):i + 12])!r}, "
            f"template {tok.decode(whole[max(0, i - 8):i + 12])!r}")


@dataclass(frozen=True)
class Case:
    family: str
    mode: str
    parser: str
    verdict: str  # "exact" or the probe's refusal
    episode: str  # "exact", "differs at ..." or "failed: ..."
    round_trip: bool | None  # None: no call to read back (user mode, or no turn to render)
    overhead: int | None = None  # an empty observation's tokens (start-up's max_observation_tokens check), if exact
    turn_mode: str = "single"  # rollout.multi_turn.mode


class _FixedClock(datetime.datetime):
    """``datetime`` whose ``now()`` is one fixed instant."""

    @classmethod
    def now(cls, tz=None):
        return cls(2026, 1, 5, 12, 0, 0, tzinfo=tz)


@contextlib.contextmanager
def fixed_clock():
    """Templates that print the date and time (transformers' ``strftime_now``: Hunyuan-A13B's to the
    second, Llama-3.x's to the day) render one instant while a case is evaluated, so its episode and
    its ground truth do not differ because a second ticked between two renderings (a case failed now
    and then under load without it)."""
    from transformers.utils import chat_template_utils

    saved = chat_template_utils.datetime
    chat_template_utils.datetime = _FixedClock
    try:
        yield
    finally:
        chat_template_utils.datetime = saved


def evaluate(family, mode: str, templates, tok=None, turn_mode: str = "single") -> Case:
    """The case of ``family`` in ``mode``, on ``tok`` (a real tokenizer given the family's template)
    or on the byte-level ``family_tokenizer``, under a :func:`fixed_clock`."""
    with fixed_clock():
        return _evaluate(family, mode, templates, tok, turn_mode)


def _evaluate(family, mode: str, templates, tok=None, turn_mode: str = "single") -> Case:
    from support_realtemplates import family_tokenizer

    if tok is None:
        tok = family_tokenizer(family, templates)
    else:
        tok.chat_template = (templates / family.template).read_text()
        if tok.pad_token is None:  # as the trainer does for a tokenizer without one
            tok.pad_token = tok.eos_token
    ends, kwargs = list(family.stops), family.kwargs or None
    parser_name = parser_for_template(tok.chat_template)
    schemas = [add_tool().schema] if mode == "tools" else None
    try:
        check_mode(tok, turn_mode, tools=schemas, observation_role="tool" if mode == "tools" else "user",
                   end_texts=ends, template_kwargs=kwargs, parser=TOOL_PARSERS[parser_name])
        verdict = "exact"
    except TemplateError as err:
        verdict = str(err)
    overhead = (observation_overhead(tok, tools=schemas, observation_role="tool" if mode == "tools" else "user",
                                     end_texts=ends, template_kwargs=kwargs, mode=turn_mode)
                if verdict == "exact" else None)
    return Case(family.name, mode, parser_name, verdict, episode(tok, mode, ends, kwargs, parser_name, turn_mode),
                _round_trip(tok, schemas, ends, kwargs, parser_name) if mode == "tools" else None, overhead, turn_mode)


def _round_trip(tok, schemas, ends, kwargs, parser_name) -> bool | None:
    message = _plan("tools")[0][0]
    message = {**message, "tool_calls": [{**message["tool_calls"][0], "id": "call00000"}]}
    try:
        text, _ = sampled_turn(tok, PROMPT, message, [], tools=schemas, end_texts=ends, kwargs=kwargs, think=False)
    except TemplateError:
        return None
    if "add" not in text:  # the template does not render calls at all
        return None
    turn = TOOL_PARSERS[parser_name](text)
    return [(c.name, c.arguments) for c in turn.calls] == [("add", {"a": 1, "b": 2})] and not turn.errors


def _stepwise_exact(tok, info, before, prompt_ids, schemas, kwargs) -> str:
    """Each turn's sample is the tokenized rendering of the conversation before it plus its sampled ids."""
    if len(info.samples) != len(before):
        return f"differs at token 0: {len(info.samples)} samples for {len(before)} turns"
    for k, (sample, conv) in enumerate(zip(info.samples, before)):
        context = prompt_ids if k == 0 else tok(render(tok, conv, tools=schemas, add_generation_prompt=True,
                                                       template_kwargs=kwargs), add_special_tokens=False)["input_ids"]
        if sample.context != context:
            i = next((i for i, (a, b) in enumerate(zip(sample.context, context)) if a != b), len(context))
            return f"differs at token {i} of turn {k}'s context"
    return "exact"


def _as_sampled_exact(tok, gen, engine, turns, conv, prompt_ids, schemas, kwargs) -> str:
    """The trained row is what the engine saw last plus the last turn; each observation is the tail
    of the template's rendering of the conversation at that point, after the turn's end token."""
    row = prompt_ids + gen.response_ids[0][gen.response_mask[0].bool()].tolist()
    contexts = engine.contexts
    if any(row[:len(c)] != c for c in contexts):
        return "differs at token ?: a turn's context is not a prefix of the trained sequence"
    assistants = [j for j, m in enumerate(conv) if m["role"] == "assistant"]
    for k in range(len(contexts) - 1):
        sampled = tok(turns[k][0], add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids(turns[k][1])]
        obs = contexts[k + 1][len(contexts[k]) + len(sampled):]
        if contexts[k + 1][len(contexts[k]): len(contexts[k]) + len(sampled)] != sampled:
            return f"differs at token {len(contexts[k])}: turn {k} is not the ids sampled"
        upto = assistants[k + 1]  # the conversation with observation k, before turn k + 1
        full = render(tok, conv[:upto], tools=schemas, add_generation_prompt=True, template_kwargs=kwargs)
        text = tok.decode(obs)
        if not (full.endswith(text) and full[: len(full) - len(text)].endswith((turns[k][1], HISTORY_CLOSERS.get(turns[k][1], turns[k][1])))
                and tok(text, add_special_tokens=False)["input_ids"] == obs):
            return f"differs at token {len(contexts[k]) + len(sampled)}: observation {k} is {text[:60]!r}"
    return "exact"
