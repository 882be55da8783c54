"""Tool-call parsers for the newer published templates (issue 32): each a linear scan with the
primitives of :mod:`.parsing`, as in :mod:`.formats`.

=================  =====================================================================
name               a call as the model writes it
=================  =====================================================================
``dsml``           DeepSeek V3.2 / V4: ``<｜DSML｜invoke name="add"><｜DSML｜parameter name="a"
                   string="false">1</｜DSML｜parameter></｜DSML｜invoke>`` (inside ``function_calls`` or
                   ``tool_calls``); ``string="true"`` values are text, others JSON
``minimax``        MiniMax-M2: ``<minimax:tool_call><invoke name="add"><parameter name="a">1</parameter>
                   </invoke></minimax:tool_call>``
``minimax_m3``     MiniMax-M3: ``]<]minimax[>[<tool_call>]<]minimax[>[<invoke name="add">]<]minimax[>[<a>1
                   ]<]minimax[>[</a>...]<]minimax[>[</invoke>]<]minimax[>[</tool_call>``
``minicpm5``       MiniCPM5: ``<function name="add"><param name="a">1</param></function>``
``seed_oss``       Seed-OSS: ``<seed:tool_call><function=add><parameter=a>1</parameter></function></seed:tool_call>``
``hy3``            Hy3: ``<tool_call:opensource>add<tool_sep:opensource><arg_key:opensource>a</arg_key:opensource>
                   <arg_value:opensource>1</arg_value:opensource></tool_call:opensource>``
``kimi_k3``        Kimi-K3: ``<|open|>call tool="add" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>1
                   <|close|>argument<|sep|><|close|>call<|sep|>`` (or one ``<|open|>json ...`` object)
``solar``          Solar-Open: ``<|tool_call:begin|>ID<|tool_call:name|>add<|tool_call:args|>{json}<|tool_call:end|>``
``json_tagged``    the JSON calls between a pair of markers: Apriel (``<tool_calls>[{...}]</tool_calls>``),
                   MiniMax-M1 (``<tool_calls>`` with one object a line), Nemotron-Nano-v2
                   (``<TOOLCALL>[...]</TOOLCALL>``), GigaChat-3.1 (``<|function_call|>{...}``)
``apertus``        Apertus: ``<|tools_prefix|>[{"add": {"a": 1}}]<|tools_suffix|>``
``lfm2``           LFM2: ``<|tool_call_start|>[add(a=1)]<|tool_call_end|>``
``functionary_v31`` functionary v3.1: ``<function=add>{json}</function>``
``functionary_v32`` functionary v3.2: ``>>>add\\n{json}`` (``>>>all\\nTEXT`` is text)
``firefunction``   firefunction v2: ``functools[{"name": "add", "arguments": {...}}]``
``command_r_plus`` Command-R+: ``Action:`` then a fenced JSON list of ``{"tool_name", "parameters"}``
``gemma4``         gemma-4: ``<|tool_call>call:add{a:1,b:<|"|>x y<|"|>}<tool_call|>`` (keys bare, text between ``<|"|>``)
=================  =====================================================================

Values in the XML-like formats are JSON when they parse as JSON, else text (as in ``qwen3_coder``).
"""

from __future__ import annotations

import json
import re

from .formats import split_blocks, glm_args, json_args, read_qwen3_coder, flag_unclosed, json_or_text, add_markers
from .parser_base import ParsedTurn, ToolCall, parsed_turn, clip_text, to_call, register_parser
from .parsing import decode_error, find, loads, run_end, skip_ws

_QUOTED = re.compile(r'[^"]*')


def _attr(text: str, lo: int, hi: int, name: str) -> str | None:
    """The value of ``name="..."`` in ``text[lo:hi]`` (a tag's attributes), or None."""
    at = find(text, f'{name}="', lo, hi)
    if at == -1:
        return None
    at += len(name) + 2
    end = run_end(text, at, _QUOTED, hi)
    return text[at:end] if end < hi else None


def invoke_calls(text: str, invoke: str, invoke_end: str, param: str, param_end: str, fmt: str):
    """``INVOKE name="N"> (PARAM name="K" ...>V PARAM_END)* INVOKE_END`` blocks, where ``invoke`` /
    ``param`` are the tags' openings (``<invoke``); a ``string="true"`` value is text, others JSON-or-text."""
    def read(text, lo, hi, i):
        gt = find(text, ">", lo, hi)
        name = _attr(text, lo - len(invoke), gt, "name") if gt != -1 else None  # the opening may hold name="
        if not name:
            return f"tool call {i}: no name=\"...\" in its {invoke}> tag; format: {fmt}"
        args, pos = {}, gt + 1
        while True:
            at = find(text, param, pos, hi)
            close = find(text, param_end, at, hi) if at != -1 else -1
            tag_end = find(text, ">", at, close) if close != -1 else -1
            if tag_end == -1:
                return to_call({"name": name.strip(), "arguments": args}, f"tool call {i}", ("arguments",), fmt)
            key = _attr(text, at, tag_end, "name")
            value = text[tag_end + 1:close]
            if key is not None:
                as_text = _attr(text, at, tag_end, "string") == "true"
                args[key] = value if as_text else json_or_text(value.strip("\n"))
            pos = close + len(param_end)
    return split_blocks(text, invoke, invoke_end, read)


def strip_wrappers(turn: ParsedTurn, *wrappers: str) -> ParsedTurn:
    content = turn.content
    for tag in wrappers:
        content = content.replace(tag, "")
    return ParsedTurn(content.strip(), turn.calls, turn.errors, turn.reasoning)


DSML = "<｜DSML｜"
DSML_FORMAT = f'{DSML}invoke name="NAME">{DSML}parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter></｜DSML｜invoke>'


@register_parser("dsml")
def parse_dsml(text: str) -> ParsedTurn:
    turn = invoke_calls(text, DSML + "invoke", "</｜DSML｜invoke>", DSML + "parameter", "</｜DSML｜parameter>",
                         DSML_FORMAT)
    turn = strip_wrappers(turn, DSML + "function_calls>", "</｜DSML｜function_calls>", DSML + "tool_calls>",
                  "</｜DSML｜tool_calls>")
    return flag_unclosed(turn, DSML + "invoke", DSML_FORMAT)


MINIMAX_FORMAT = '<minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter></invoke></minimax:tool_call>'


@register_parser("minimax")
def parse_minimax(text: str) -> ParsedTurn:
    turn = invoke_calls(text, "<invoke", "</invoke>", "<parameter", "</parameter>", MINIMAX_FORMAT)
    return flag_unclosed(strip_wrappers(turn, "<minimax:tool_call>", "</minimax:tool_call>"), "<invoke", MINIMAX_FORMAT)


MINICPM5_FORMAT = '<function name="NAME"><param name="KEY">VALUE</param></function>'


@register_parser("minicpm5")
def parse_minicpm5(text: str) -> ParsedTurn:
    turn = invoke_calls(text, '<function name="', "</function>", "<param", "</param>", MINICPM5_FORMAT)
    return flag_unclosed(turn, '<function name="', MINICPM5_FORMAT)


M3 = "]<]minimax[>["
M3_FORMAT = f'{M3}<tool_call>{M3}<invoke name="NAME">{M3}<KEY>VALUE{M3}</KEY>...{M3}</invoke>{M3}</tool_call>'


@register_parser("minimax_m3")
def parse_minimax_m3(text: str) -> ParsedTurn:
    def read(text, lo, hi, i):
        pieces = text[lo:hi].split(M3)  # bounded by the block: linear
        head = next((p for p in pieces if p.startswith("<invoke")), None)
        name = _attr(head, 0, len(head), "name") if head else None
        if not name:
            return f"tool call {i}: no <invoke name=\"...\">; format: {M3_FORMAT}"
        args = {}
        for j, piece in enumerate(pieces):
            if piece.startswith("<") and not piece.startswith(("</", "<invoke")) and ">" in piece:
                key, value = piece[1:].split(">", 1)
                if j + 1 < len(pieces) and pieces[j + 1].strip() == f"</{key}>":
                    args[key] = json_or_text(value)
        return to_call({"name": name, "arguments": args}, f"tool call {i}", ("arguments",), M3_FORMAT)
    turn = split_blocks(text, M3 + "<tool_call>", M3 + "</tool_call>", read)
    return flag_unclosed(strip_wrappers(turn, M3), "<tool_call>", M3_FORMAT)


SEED_FORMAT = "<seed:tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></seed:tool_call>"


@register_parser("seed_oss")
def parse_seed_oss(text: str) -> ParsedTurn:
    turn = split_blocks(text, "<seed:tool_call>", "</seed:tool_call>", read_qwen3_coder)
    return flag_unclosed(turn, "<seed:tool_call>", SEED_FORMAT)


HY3_FORMAT = ("<tool_call:opensource>NAME<tool_sep:opensource><arg_key:opensource>KEY</arg_key:opensource>"
              "<arg_value:opensource>VALUE</arg_value:opensource></tool_call:opensource>")
_HY3_TAGS = ("<arg_key:opensource>", "</arg_key:opensource>", "<arg_value:opensource>", "</arg_value:opensource>")


@register_parser("hy3")
def parse_hy3(text: str) -> ParsedTurn:
    def read(text, lo, hi, i):
        sep = find(text, "<tool_sep:opensource>", lo, hi)
        name = text[lo:sep].strip() if sep != -1 else ""
        if not name:
            return f"tool call {i}: no NAME<tool_sep:opensource>; format: {HY3_FORMAT}"
        return ToolCall(name, glm_args(text, sep, hi, _HY3_TAGS))
    turn = split_blocks(text, "<tool_call:opensource>", "</tool_call:opensource>", read)
    turn = strip_wrappers(turn, "<tool_calls:opensource>", "</tool_calls:opensource>")
    return flag_unclosed(turn, "<tool_call:opensource>", HY3_FORMAT)


KIMI3_FORMAT = ('<|open|>call tool="NAME" index="1"<|sep|><|open|>argument key="KEY" type="string"<|sep|>VALUE'
                "<|close|>argument<|sep|><|close|>call<|sep|>")


@register_parser("kimi_k3")
def parse_kimi_k3(text: str) -> ParsedTurn:
    def read(text, lo, hi, i):
        sep = find(text, "<|sep|>", lo, hi)
        name = _attr(text, lo, sep, "tool") if sep != -1 else None
        if not name:
            return f"tool call {i}: no tool=\"...\" in <|open|>call; format: {KIMI3_FORMAT}"
        whole = find(text, "<|open|>json", sep, hi)
        if whole != -1:
            body_at = find(text, "<|sep|>", whole, hi)
            body_end = find(text, "<|close|>json", body_at, hi) if body_at != -1 else -1
            if body_end == -1:
                return f"tool call {i} ({name}): a <|open|>json never closed; format: {KIMI3_FORMAT}"
            return json_args(name, text[body_at + len("<|sep|>"):body_end], f"tool call {i}", KIMI3_FORMAT)
        args, pos = {}, sep
        while True:
            at = find(text, "<|open|>argument", pos, hi)
            head_end = find(text, "<|sep|>", at, hi) if at != -1 else -1
            close = find(text, "<|close|>argument", head_end, hi) if head_end != -1 else -1
            if close == -1:
                return ToolCall(name, args)
            key, kind = _attr(text, at, head_end, "key"), _attr(text, at, head_end, "type")
            value = text[head_end + len("<|sep|>"):close]
            if key is not None:
                args[key] = value if kind == "string" else json_or_text(value)
            pos = close + len("<|close|>argument")
    turn = split_blocks(text, "<|open|>call", "<|close|>call<|sep|>", read)
    return flag_unclosed(strip_wrappers(turn, "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"), "<|open|>call", KIMI3_FORMAT)


SOLAR_FORMAT = "<|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{json}<|tool_call:end|>"


@register_parser("solar")
def parse_solar(text: str) -> ParsedTurn:
    def read(text, lo, hi, i):
        name_at = find(text, "<|tool_call:name|>", lo, hi)
        args_at = find(text, "<|tool_call:args|>", name_at, hi) if name_at != -1 else -1
        if args_at == -1:
            return f"tool call {i}: no <|tool_call:name|> and <|tool_call:args|>; format: {SOLAR_FORMAT}"
        name, call_id = text[name_at + len("<|tool_call:name|>"):args_at].strip(), text[lo:name_at].strip()
        return json_args(name, text[args_at + len("<|tool_call:args|>"):hi], f"tool call {i}", SOLAR_FORMAT,
                          call_id or None)
    turn = split_blocks(text, "<|tool_call:begin|>", "<|tool_call:end|>", read)
    return flag_unclosed(strip_wrappers(turn, "<|tool_calls|>", "<|calls|>"), "<|tool_call:begin|>", SOLAR_FORMAT)


_JSON_TAGS = (("<tool_calls>", "</tool_calls>"), ("<TOOLCALL>", "</TOOLCALL>"), ("<|function_call|>", None))
JSON_TAGGED_FORMAT = '<tool_calls>[{"name": NAME, "arguments": {...}}, ...]</tool_calls> (or <TOOLCALL>, <|function_call|>)'


def _json_values(body: str, where: int):
    """The JSON values of ``body``, one after the other (a list's items spread), or an error line."""
    from .parser_base import JSON_DECODER

    values, pos = [], skip_ws(body, 0)
    while pos < len(body):
        try:
            value, pos = JSON_DECODER.raw_decode(body, pos)
        except (ValueError, RecursionError) as err:
            return f"tool calls: invalid JSON ({decode_error(err)}) in {clip_text(body)!r}; format: {JSON_TAGGED_FORMAT}"
        values += value if isinstance(value, list) else [value]
        pos = skip_ws(body, pos)
    return values


@register_parser("json_tagged")
def parse_json_tagged(text: str) -> ParsedTurn:
    opener, closer = next(((o, c) for o, c in _JSON_TAGS if o in text), (None, None))
    if opener is None:
        return ParsedTurn(text.strip())

    def read(text, lo, hi, i):
        values = _json_values(text[lo:hi], i)
        if isinstance(values, str):
            return values
        out = [to_call(v, f"tool call {j}", ("arguments", "parameters"), JSON_TAGGED_FORMAT)
               for j, v in enumerate(values, i)]
        return [ToolCall(c.name, c.arguments, v.get("id") if isinstance(v.get("id"), str) else None)
                if isinstance(c, ToolCall) else c for c, v in zip(out, values)]
    if closer is None:  # GigaChat: the call runs to the end of the turn (or its message separator)
        start = text.find(opener)
        end = find(text, "<|message_sep|>", start)
        end = len(text) if end == -1 else end
        return parsed_turn(text[:start], read(text, start + len(opener), end, 1))
    return flag_unclosed(split_blocks(text, opener, closer, read), opener, JSON_TAGGED_FORMAT)


APERTUS_FORMAT = '<|tools_prefix|>[{"NAME": {...}}, ...]<|tools_suffix|>'


@register_parser("apertus")
def parse_apertus(text: str) -> ParsedTurn:
    def read(text, lo, hi, i):
        items, err = loads(text[lo:hi])
        if err is not None:
            return f"tool calls: invalid JSON ({decode_error(err)}) in {clip_text(text[lo:hi])!r}; format: {APERTUS_FORMAT}"
        items = items if isinstance(items, list) else [items]
        return [to_call({"name": next(iter(o)), "arguments": next(iter(o.values()))}
                         if isinstance(o, dict) and len(o) == 1 else o, f"tool call {j}", ("arguments",),
                         APERTUS_FORMAT) for j, o in enumerate(items, i)]
    return flag_unclosed(split_blocks(text, "<|tools_prefix|>", "<|tools_suffix|>", read), "<|tools_prefix|>", APERTUS_FORMAT)


LFM2_FORMAT = "<|tool_call_start|>[NAME(KEY=VALUE, ...), ...]<|tool_call_end|>"


@register_parser("lfm2")
def parse_lfm2(text: str) -> ParsedTurn:
    """LFM2's pythonic calls between markers (its templates list tools but render no calls)."""
    from .formats import parse_pythonic

    def read(text, lo, hi, i):
        inner = parse_pythonic(text[lo:hi])
        return [*inner.calls, *inner.errors] or [f"tool call {i}: no [NAME(...)] list; format: {LFM2_FORMAT}"]
    return flag_unclosed(split_blocks(text, "<|tool_call_start|>", "<|tool_call_end|>", read), "<|tool_call_start|>",
                     LFM2_FORMAT)


GEMMA4_FORMAT = '<|tool_call>call:NAME{KEY:VALUE,...}<tool_call|> (text values as <|"|>TEXT<|"|>)'
_GEMMA_QUOTE = '<|"|>'
_GEMMA_BARE = re.compile(r"[^{}\[\],:]*")


def _gemma_value(run: str) -> str:
    """A bare value as JSON: a number, true/false, None (null), else its text."""
    word = run.strip()
    if word == "None":
        return "null"
    value, err = loads(word)
    return word if err is None and not isinstance(value, str) else json.dumps(word)


def _gemma_json(text: str, lo: int, hi: int) -> str | None:
    """gemma-4's argument syntax in ``text[lo:hi]`` as JSON text (keys bare, text between ``<|"|>``
    marks); None when a text value is never closed. One pass: each step consumes what it reads."""
    out, pos = [], lo
    while pos < hi:
        if text.startswith(_GEMMA_QUOTE, pos):
            end = find(text, _GEMMA_QUOTE, pos + len(_GEMMA_QUOTE), hi)
            if end == -1:
                return None
            out.append(json.dumps(text[pos + len(_GEMMA_QUOTE):end]))
            pos = end + len(_GEMMA_QUOTE)
        elif text[pos] in "{}[],:":
            out.append(text[pos])
            pos += 1
        else:
            end = max(run_end(text, pos, _GEMMA_BARE, hi), pos + 1)
            key = text.startswith(":", skip_ws(text, end, hi))
            out.append(json.dumps(text[pos:end].strip()) if key else _gemma_value(text[pos:end]))
            pos = end
    return "".join(out)


@register_parser("gemma4")
def parse_gemma4(text: str) -> ParsedTurn:
    def read(text, lo, hi, i):
        brace = find(text, "{", lo, hi)
        end = hi - 1 if hi > lo and text[hi - 1] == "}" else -1
        name = text[lo:brace].strip() if brace != -1 else ""
        if not name or end < brace:
            return f"tool call {i}: expected NAME{{...}}; format: {GEMMA4_FORMAT}"
        inner = text[brace + 1:end]
        as_json, err = loads(inner) if inner.lstrip().startswith("{") else (None, True)
        if err is None and isinstance(as_json, dict):  # arguments the template was given as a JSON string
            return to_call({"name": name, "arguments": as_json}, f"tool call {i}", ("arguments",), GEMMA4_FORMAT)
        body = _gemma_json(text, brace, end + 1)
        if body is None:
            return f"tool call {i} ({name}): a {_GEMMA_QUOTE} text is never closed; format: {GEMMA4_FORMAT}"
        return json_args(name, body, f"tool call {i}", GEMMA4_FORMAT)
    turn = split_blocks(text, "<|tool_call>call:", "<tool_call|>", read)
    return flag_unclosed(turn, "<|tool_call>call:", GEMMA4_FORMAT)


FUNCTIONARY_V31_FORMAT = "<function=NAME>{json}</function>"
FUNCTIONARY_V32_FORMAT = ">>>NAME\\n{json} (>>>all\\nTEXT for text; the generation prompt ends with >>>)"
_RECIPIENT = re.compile(r"[\w.\-]*")


@register_parser("functionary_v31")
def parse_functionary_v31(text: str) -> ParsedTurn:
    def read(text, lo, hi, i):
        gt = find(text, ">", lo, hi)
        name = text[lo:gt].strip() if gt != -1 else ""
        if not name:
            return f"tool call {i}: expected <function=NAME>; format: {FUNCTIONARY_V31_FORMAT}"
        return json_args(name, text[gt + 1:hi], f"tool call {i}", FUNCTIONARY_V31_FORMAT)
    return flag_unclosed(split_blocks(text, "<function=", "</function>", read), "<function=", FUNCTIONARY_V31_FORMAT)


@register_parser("functionary_v32")
def parse_functionary_v32(text: str) -> ParsedTurn:
    """Segments ``>>>RECIPIENT\\n...``: ``all`` is text, any other recipient a call with JSON
    arguments; the turn's first segment follows the generation prompt's ``>>>``."""
    body = text if text.startswith(">>>") else ">>>" + text
    pieces, results, pos = [], [], 0
    while pos < len(body):
        nxt = find(body, ">>>", pos + 3)
        end = len(body) if nxt == -1 else nxt
        name_end = run_end(body, pos + 3, _RECIPIENT, end)
        if name_end == pos + 3 or not body.startswith("\n", name_end):
            pieces.append(body[pos if pos else 3:end])  # not a segment head: text as written
        elif body[pos + 3:name_end] == "all":
            pieces.append(body[name_end + 1:end])
        else:
            results.append(json_args(body[pos + 3:name_end], body[name_end + 1:end], f"tool call {len(results) + 1}",
                                      FUNCTIONARY_V32_FORMAT))
        pos = end
    return parsed_turn("".join(pieces), results)


FIREFUNCTION_FORMAT = 'functools[{"name": NAME, "arguments": {...}}, ...]'
COMMAND_R_PLUS_FORMAT = 'Action:\\n```json\\n[{"tool_name": NAME, "parameters": {...}}, ...]\\n```'


def _json_list_after(text: str, marker: str, fence: str, keys: tuple[str, str], fmt: str) -> ParsedTurn:
    """A JSON list of calls after ``marker`` (and ``fence``, a code fence opening, when not empty):
    items ``{keys[0]: NAME, keys[1]: {...}}``; the text before the marker is the content."""
    from .parser_base import JSON_DECODER

    start = text.find(marker)
    if start == -1:
        return ParsedTurn(text.strip())
    at = skip_ws(text, start + len(marker) - marker.endswith("["))  # a marker ending in "[" opens the list
    if fence and not text.startswith(fence, at):
        return ParsedTurn(text.strip())  # the marker's word in plain text, not a call list
    at = skip_ws(text, at + len(fence)) if fence else at
    try:
        items, _ = JSON_DECODER.raw_decode(text, at)
    except (ValueError, RecursionError) as err:
        return parsed_turn(text[:start], [f"tool calls: invalid JSON ({decode_error(err, at=False)}) in "
                                      f"{clip_text(text[at:])!r}; format: {fmt}"])
    items = items if isinstance(items, list) else [items]
    return parsed_turn(text[:start], [to_call({"name": o.get(keys[0]), "arguments": o.get(keys[1], {})}
                                           if isinstance(o, dict) else o, f"tool call {i}", ("arguments",), fmt)
                                  for i, o in enumerate(items, 1)])


@register_parser("firefunction")
def parse_firefunction(text: str) -> ParsedTurn:
    return _json_list_after(text, "functools[", "", ("name", "arguments"), FIREFUNCTION_FORMAT)


@register_parser("command_r_plus")
def parse_command_r_plus(text: str) -> ParsedTurn:
    return _json_list_after(text, "Action:", "```json", ("tool_name", "parameters"), COMMAND_R_PLUS_FORMAT)


MARKERS = (  # read by `auto` before the older formats' markers (more_formats' are more specific)
    (DSML + "invoke", "dsml"), ("<minimax:tool_call>", "minimax"), (M3 + "<tool_call>", "minimax_m3"),
    ('<function name="', "minicpm5"), ("<seed:tool_call>", "seed_oss"), ("<tool_call:opensource>", "hy3"),
    ("<|open|>call", "kimi_k3"), ("<|tool_call:begin|>", "solar"), ("<|tools_prefix|>", "apertus"),
    ("<tool_calls>", "json_tagged"), ("<TOOLCALL>", "json_tagged"), ("<|function_call|>", "json_tagged"),
    ("<|tool_call_start|>", "lfm2"), ("<|tool_call>call:", "gemma4"), ("functools[", "firefunction"),
    ("Action:\n```json", "command_r_plus"),
)

TEMPLATE_MARKERS = (  # templates that build their markers from pieces, or share another format's marker
    ("｜DSML｜", "dsml"), (M3, "minimax_m3"), ("format(HYTK)", "hy3"), ("open_tag('call'", "kimi_k3"),
    ("'<function=' + tool_call", "functionary_v31"), ("'>>>' + tool_call", "functionary_v32"),
    ("Action:\\n```json", "command_r_plus"),
    ("<|tool_list_start|>", "lfm2"),
)

add_markers(MARKERS, TEMPLATE_MARKERS, {"qwen3_coder": "functionary_v31"})
