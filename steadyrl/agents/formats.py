"""Tool-call parsers for the formats the published chat templates teach (beyond ``hermes`` and
``llama3_json``, in :mod:`.parsers`), and ``auto``, which reads whichever of them a turn is in.

=================  =====================================================================
name               a call as the model writes it
=================  =====================================================================
``qwen3_coder``    ``<tool_call><function=add><parameter=a>1</parameter></function></tool_call>``
``mistral``        ``[TOOL_CALLS][{"name": "add", "arguments": {...}, "id": "..."}]`` (v3) or
                   ``[TOOL_CALLS]add[CALL_ID]abc123def[ARGS]{...}`` / ``[TOOL_CALLS]add[ARGS]{...}`` (v11)
``glm45``          ``<tool_call>add<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>``
``kimi_k2``        ``<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>{...}<|tool_call_end|>...``
``harmony``        ``... to=functions.add<|channel|>commentary json<|message|>{...}`` (gpt-oss)
``deepseek``       ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\\n```json\\n{...}\\n```<｜tool▁call▁end｜>`` (R1) or
                   ``<｜tool▁call▁begin｜>add<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`` (V3.1)
``pythonic``       ``[add(a=1, b=2), ...]`` (Llama-3.2 pythonic; gemma-3's and Llama-4's in :mod:`.pythonic_formats`)
``command_r``      ``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "add", "parameters": {...}}]<|END_ACTION|>``
=================  =====================================================================

Parameter values in the XML formats are JSON when they parse as JSON, else strings. Ids the model
writes (Mistral's, Kimi-K2's ``functions.add:0``) are kept on the call. A call that cannot be read
gives one error line, as in :mod:`.parsers`. :func:`parser_for_template` names the format a chat
template teaches.
"""

from __future__ import annotations

import ast
import json
import re

from .parser_base import PYTHON_TAG, ParsedTurn, ToolCall, parsed_turn, clip_text, to_call, parse_llama3_json, register_parser
from .parsing import back_ws, decode_error, find, loads, run_end, skip_ws

_DECODER = json.JSONDecoder()


def json_or_text(text: str):
    value, err = loads(text)
    return text if err is not None else value


def json_args(name: str, body: str, where: str, fmt: str, call_id: str | None = None):
    args, err = loads(body) if body.strip() else ({}, None)
    if err is not None:
        return f"{where} ({name}): invalid JSON arguments ({decode_error(err, at=False)}) in " \
               f"{clip_text(body)!r}; format: {fmt}"
    result = to_call({"name": name, "arguments": args}, where, ("arguments",), fmt)
    return ToolCall(result.name, result.arguments, call_id) if isinstance(result, ToolCall) else result


def _spans(text: str, opener: str, closer: str | None, pos: int = 0, end: int | None = None):
    """``(start, inner start, inner end, end)`` of each ``opener ... closer`` in ``text[pos:end]``, in
    order, none inside another; an opener never closed ends the spans (``closer`` None: every span
    runs to ``end``, as a section whose close may be cut off). Linear: each search starts where the
    last one ended."""
    end = len(text) if end is None else end
    while True:
        start = find(text, opener, pos, end)
        if start == -1:
            return
        inner = start + len(opener)
        close = find(text, closer, inner, end) if closer is not None else -1
        if close == -1 and closer is not None:
            return
        yield start, inner, end if close == -1 else close, end if close == -1 else close + len(closer)
        pos = end if close == -1 else close + len(closer)


def split_blocks(text: str, opener: str, closer: str | None, read) -> ParsedTurn:
    """Content outside the ``opener ... closer`` spans; ``read(text, inner start, inner end, index)``
    -> a ToolCall, an error line, a list of them, or None (not a call: the span stays content)."""
    results, pieces, pos, index = [], [], 0, 0
    for start, lo, hi, end in _spans(text, opener, closer):
        found = read(text, lo, hi, index + 1)
        if found is None:
            continue
        index += 1
        pieces.append(text[pos:start])
        results.extend(found if isinstance(found, list) else [found])
        pos = end
    pieces.append(text[pos:])
    return parsed_turn("".join(pieces), results)


_NAME_TO_GT = re.compile(r"[^>\n]*")
_LINE = re.compile(r"[^<\n]*")

QWEN3_CODER_FORMAT = "<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>"
_FUNCTION, _FUNCTION_END = "<function=", "</function>"
_PARAM, _PARAM_END = "<parameter=", "</parameter>"


def _qwen3_params(text: str, lo: int, hi: int) -> dict:
    """``<parameter=KEY>\n?VALUE\n?</parameter>`` pairs in ``text[lo:hi]``; one with no key is skipped."""
    args = {}
    for _, key_at, value_end, _ in _spans(text, _PARAM, _PARAM_END, lo, hi):
        gt = run_end(text, key_at, _NAME_TO_GT, value_end)
        if gt == key_at or gt == value_end or text[gt] != ">":
            continue
        value = text[gt + 1: value_end]
        value = value[1:] if value.startswith("\n") else value
        args[text[key_at:gt].strip()] = json_or_text(value[:-1] if value.endswith("\n") else value)
    return args


def read_qwen3_coder(text: str, lo: int, hi: int, i: int):
    """``<function=NAME>(<parameter=KEY>VALUE</parameter>)*</function>`` in ``text[lo:hi]``; None: not that."""
    at = skip_ws(text, lo, hi)
    if not text.startswith(_FUNCTION, at):
        return None
    name_at = at + len(_FUNCTION)
    gt = run_end(text, name_at, _NAME_TO_GT, hi)
    body_end = back_ws(text, hi, gt)
    if gt == name_at or gt == hi or text[gt] != ">" or not text.endswith(_FUNCTION_END, gt + 1, body_end):
        return None
    return ToolCall(text[name_at:gt].strip(), _qwen3_params(text, gt + 1, body_end - len(_FUNCTION_END)))


@register_parser("qwen3_coder")
def parse_qwen3_coder(text: str) -> ParsedTurn:
    return flag_unclosed(split_blocks(text, "<tool_call>", "</tool_call>", read_qwen3_coder), "<tool_call>", QWEN3_CODER_FORMAT)


GLM_FORMAT = "<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>"


GLM_TAGS = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")


def glm_args(text: str, pos: int, hi: int, tags: tuple[str, str, str, str] = GLM_TAGS) -> dict:
    """``<arg_key>KEY</arg_key>\s*<arg_value>VALUE</arg_value>`` pairs in ``text[pos:hi]`` (``tags``:
    the four tags, for the formats that spell them otherwise)."""
    key_open, key_close, value_open, value_close = tags
    args = {}
    while True:
        key_at = find(text, key_open, pos, hi)
        key_end = find(text, key_close, key_at, hi) if key_at != -1 else -1
        if key_end == -1:
            return args
        value_at = skip_ws(text, key_end + len(key_close), hi)
        pos = value_at
        if not text.startswith(value_open, value_at):
            continue  # a key with no value: skipped
        value_end = find(text, value_close, value_at, hi)
        if value_end == -1:
            return args
        args[text[key_at + len(key_open):key_end].strip()] = json_or_text(text[value_at + len(value_open):value_end])
        pos = value_end + len(value_close)


@register_parser("glm45")
def parse_glm45(text: str) -> ParsedTurn:
    def read(text, lo, hi, i):
        name_end = run_end(text, lo, _LINE, hi)
        return None if name_end == lo else ToolCall(text[lo:name_end].strip(), glm_args(text, name_end, hi))
    return flag_unclosed(split_blocks(text, "<tool_call>", "</tool_call>", read), "<tool_call>", GLM_FORMAT)


def flag_unclosed(turn: ParsedTurn, opener: str, fmt: str) -> ParsedTurn:
    if opener not in turn.content:
        return turn
    return ParsedTurn(turn.content, turn.calls, [*turn.errors, f"a {opener} that is never closed; format: {fmt}"])


KIMI_FORMAT = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>"
               "{json}<|tool_call_end|><|tool_calls_section_end|>")
_KIMI_ARGS = "<|tool_call_argument_begin|>"


def _kimi_section(text: str, lo: int, hi: int, i: int):
    """Every ``<|tool_call_begin|>ID<|tool_call_argument_begin|>{json}<|tool_call_end|>`` of a section."""
    results, j = [], i
    for _, id_at, call_end, _ in _spans(text, "<|tool_call_begin|>", "<|tool_call_end|>", lo, hi):
        args_at = find(text, _KIMI_ARGS, id_at, call_end)
        cid = text[id_at:args_at].strip() if args_at != -1 else ""
        if not cid or any(c.isspace() for c in cid):
            continue
        name = cid.split(".", 1)[-1].rsplit(":", 1)[0]
        results.append(json_args(name, text[args_at + len(_KIMI_ARGS):call_end], f"tool call {j}", KIMI_FORMAT, cid))
        j += 1
    return results or [f"tool call {i}: no <|tool_call_begin|> in the tool calls section; format: {KIMI_FORMAT}"]


@register_parser("kimi_k2")
def parse_kimi_k2(text: str) -> ParsedTurn:
    """Sections run to their ``<|tool_calls_section_end|>``, or to the end of a turn cut off."""
    opener, closer = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
    results, pieces, pos, index = [], [], 0, 0
    while True:
        start = find(text, opener, pos)
        if start == -1:
            break
        close = find(text, closer, start + len(opener))
        hi = len(text) if close == -1 else close
        pieces.append(text[pos:start])
        index += 1
        results.extend(_kimi_section(text, start + len(opener), hi, index))
        pos = hi if close == -1 else close + len(closer)
    pieces.append(text[pos:])
    return parsed_turn("".join(pieces), results)


HARMONY_FORMAT = "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{json}<|call|>"
_HARMONY_TO = "to=functions."
_HARMONY_NAME = re.compile(r"[\w.\-]*")
_WORD = re.compile(r"\w")


def _harmony_start(text: str, to: int, floor: int) -> int:
    """Where a call whose ``to=functions.`` is at ``to`` starts: before the whitespace, the
    ``<|channel|>WORD`` and the ``<|start|>assistant`` right before it (none before ``floor``)."""
    start = back_ws(text, to, floor)
    word = start
    while word > floor and _WORD.match(text[word - 1]):
        word -= 1
    if word < start and text.endswith("<|channel|>", floor, word):
        start = back_ws(text, word - len("<|channel|>"), floor)
    if text.endswith("<|start|>assistant", floor, start):
        start -= len("<|start|>assistant")
    return start


def _harmony_message(text: str, after_name: int) -> int:
    """The index after ``<|message|>`` when the header after the call's name is ``[^<]* (<|channel|>
    [^<]*)? (<|constrain|>[^<]*)? <|message|>``; -1: it is not (-2: no ``<`` follows at all)."""
    at = find(text, "<", after_name)
    if at == -1:
        return -2
    for tag in ("<|channel|>", "<|constrain|>"):
        if text.startswith(tag, at):
            at = find(text, "<", at + len(tag))
            if at == -1:
                return -2
    return at + len("<|message|>") if text.startswith("<|message|>", at) else -1


def _harmony_calls(text: str) -> ParsedTurn:
    results, pieces, pos, search = [], [], 0, 0
    while True:
        to = find(text, _HARMONY_TO, search)
        if to == -1:
            break
        name_at = to + len(_HARMONY_TO)
        name_end = run_end(text, name_at, _HARMONY_NAME)
        body_at = _harmony_message(text, name_end) if name_end > name_at else -1
        if body_at < 0:
            if body_at == -2:
                break  # no "<" after: no later call can have its <|message|> either
            search = name_end if name_end > name_at else name_at  # a later to= before that "<" fails alike
            continue
        call = find(text, "<|call|>", body_at)
        start = _harmony_start(text, to, pos)
        pieces.append(text[pos:start])
        results.append(json_args(text[name_at:name_end], text[body_at: len(text) if call == -1 else call],
                                  f"tool call {len(results) + 1}", HARMONY_FORMAT))
        pos = search = len(text) if call == -1 else call + len("<|call|>")
    pieces.append(text[pos:])
    return parsed_turn("".join(pieces), results)


def _channel(text: str, marker: str, ends: tuple[str, ...]) -> list[tuple[int, int, int, int]]:
    """``(start, body start, body end, end)`` of each ``marker BODY`` up to the first of ``ends``
    (or the end of the text)."""
    out, pos, found = [], 0, {close: -2 for close in ends}  # each closer's next place (-1: none left)
    while True:
        start = find(text, marker, pos)
        if start == -1:
            return out
        lo = start + len(marker)
        for close, at in found.items():
            if at != -1 and at < lo:
                found[close] = find(text, close, lo)
        hi = min([e for e in found.values() if e != -1], default=len(text))
        closer = next((c for c in ends if text.startswith(c, hi)), "")
        out.append((start, lo, hi, hi + len(closer)))
        pos = hi + len(closer)
        if not closer:
            return out


@register_parser("harmony")
def parse_harmony(text: str) -> ParsedTurn:
    """Calls on the commentary channel; ``content`` the final channel's text (else the text outside
    calls and analysis), ``reasoning`` the analysis channel's."""
    turn = _harmony_calls(text)
    content = turn.content
    final = _channel(content, "<|channel|>final<|message|>", ("<|end|>", "<|return|>"))[:1]
    analysis = _channel(content, "<|channel|>analysis<|message|>", ("<|end|>",))
    reasoning = "".join(content[lo:hi] for _, lo, hi, _ in analysis).strip()
    kept, pos = [], 0
    for start, _, _, end in analysis:
        kept.append(content[pos:start])
        pos = end
    rest = ("".join(kept) + content[pos:]).replace("<|start|>assistant", "").strip()
    return ParsedTurn(content[final[0][1]:final[0][2]].strip() if final else rest, turn.calls, turn.errors, reasoning)


DEEPSEEK_FORMAT = "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>"
_DEEPSEEK_SEP = "<｜tool▁sep｜>"
_DEEPSEEK_NAME = re.compile(r"[^<\n{`]*")


def _deepseek_call(text: str, lo: int, hi: int, i: int):
    """``(function<sep>)? NAME <sep>? (```json)? {json} (```)?`` in ``text[lo:hi]``; None: not that."""
    if text.startswith("function" + _DEEPSEEK_SEP, lo):
        lo += len("function" + _DEEPSEEK_SEP)
    name_end = run_end(text, lo, _DEEPSEEK_NAME, hi)
    at = skip_ws(text, name_end, hi)
    if text.startswith(_DEEPSEEK_SEP, at):
        at = skip_ws(text, at + len(_DEEPSEEK_SEP), hi)
    if text.startswith("```json", at):
        at = skip_ws(text, at + len("```json"), hi)
    end = back_ws(text, hi, at)
    if text.endswith("```", at, end):
        end = back_ws(text, end - 3, at)
    name = text[lo:name_end].strip()
    if not name or not text.startswith("{", at) or not text.endswith("}", at, end):
        return None
    return json_args(name, text[at:end], f"tool call {i}", DEEPSEEK_FORMAT)


@register_parser("deepseek")
def parse_deepseek(text: str) -> ParsedTurn:
    turn = split_blocks(text, "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", _deepseek_call)
    content = turn.content.replace("<｜tool▁calls▁begin｜>", "").replace("<｜tool▁calls▁end｜>", "")
    return flag_unclosed(ParsedTurn(content.strip(), turn.calls, turn.errors), "<｜tool▁call▁begin｜>", DEEPSEEK_FORMAT)


MISTRAL_FORMAT = '[TOOL_CALLS][{"name": NAME, "arguments": {...}}] or [TOOL_CALLS]NAME[ARGS]{...}'
_MISTRAL_NAME = re.compile(r"[^\[\s]*")
_ALNUM = re.compile(r"[A-Za-z0-9]*")


def _mistral_header(text: str, at: int) -> tuple[str, str | None, int] | None:
    """``(name, id, index after [ARGS])`` of ``\\s* NAME \\s* ([CALL_ID] \\s* ID \\s*)? [ARGS]`` at ``at``."""
    name_at = skip_ws(text, at)
    name_end = run_end(text, name_at, _MISTRAL_NAME)
    at, call_id = skip_ws(text, name_end), None
    if text.startswith("[CALL_ID]", at):
        id_at = skip_ws(text, at + len("[CALL_ID]"))
        id_end = run_end(text, id_at, _ALNUM)
        if id_end > id_at:
            call_id, at = text[id_at:id_end], skip_ws(text, id_end)
    if name_end == name_at or not text.startswith("[ARGS]", at):
        return None
    return text[name_at:name_end], call_id, at + len("[ARGS]")

@register_parser("mistral")
def parse_mistral(text: str) -> ParsedTurn:
    start = text.find("[TOOL_CALLS]")
    if start == -1:
        return ParsedTurn(text.strip())
    at = skip_ws(text, start + len("[TOOL_CALLS]"))
    if text.startswith("[", at):  # v3: a JSON list
        try:
            items, _ = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError) as err:
            rest = text[at:]
            return parsed_turn(text[:start], [f"tool calls: invalid JSON ({decode_error(err, at=False)}) "
                                          f"in {clip_text(rest)!r}; format: {MISTRAL_FORMAT}"])
        items = items if isinstance(items, list) else [items]
        results = [to_call(o, f"tool call {i}", ("arguments", "parameters"), MISTRAL_FORMAT)
                   for i, o in enumerate(items, 1)]
        results = [ToolCall(r.name, r.arguments, o.get("id")) if isinstance(r, ToolCall) else r
                   for r, o in zip(results, items)]
        return parsed_turn(text[:start], results)
    results, pos, search = [], start, start
    while True:  # v11: [TOOL_CALLS]NAME([CALL_ID]ID)?[ARGS]{json}, one after the other
        opener = find(text, "[TOOL_CALLS]", search)
        if opener == -1:
            break
        header = _mistral_header(text, opener + len("[TOOL_CALLS]"))
        if header is None:
            search = opener + len("[TOOL_CALLS]")
            continue
        name, call_id, args_at = header
        i = len(results) + 1
        try:
            args, end = _DECODER.raw_decode(text, args_at)
        except (ValueError, RecursionError) as err:
            results.append(f"tool call {i} ({name}): invalid JSON arguments "
                           f"({decode_error(err, at=False)}); format: {MISTRAL_FORMAT}")
            break
        result = to_call({"name": name, "arguments": args}, f"tool call {i}", ("arguments",), MISTRAL_FORMAT)
        results.append(ToolCall(result.name, result.arguments, call_id) if isinstance(result, ToolCall) else result)
        pos = search = end
    if not results:
        results.append(f"a [TOOL_CALLS] without a call after it; format: {MISTRAL_FORMAT}")
    return parsed_turn(text[:start] + text[pos:] if pos > start else text[:start], results)


PYTHONIC_FORMAT = "[tool_name(arg=value, ...), ...]"
_DOTTED = re.compile(r"[\w.]*")
_IDENT_START = re.compile(r"[A-Za-z_]")


def _pythonic_start(body: str) -> bool:
    """The body starts as ``[ name(`` does (``\\[\\s*[A-Za-z_][\\w.]*\\(``)."""
    at = skip_ws(body, 1) if body.startswith("[") else -1
    if at == -1 or not _IDENT_START.match(body, at):
        return False
    return body.startswith("(", run_end(body, at + 1, _DOTTED))


@register_parser("pythonic")
def parse_pythonic(text: str) -> ParsedTurn:
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG):].strip()
    if not _pythonic_start(body):
        return ParsedTurn(content=text.strip())
    try:
        tree = ast.parse(body, mode="eval").body
        if not isinstance(tree, ast.List):
            raise ValueError("not a list of calls")
        results = []
        for i, node in enumerate(tree.elts, 1):
            if not isinstance(node, ast.Call) or node.args:
                raise ValueError(f"call {i} is not name(keyword=value, ...)")
            results.append(ToolCall(ast.unparse(node.func), {k.arg: ast.literal_eval(k.value) for k in node.keywords}))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as err:
        reason = str(err) or type(err).__name__  # MemoryError / RecursionError: nested too deeply for the parser
        return parsed_turn("", [f"tool calls: {reason} in {clip_text(body)!r}; format: {PYTHONIC_FORMAT}"])
    return parsed_turn("", results)


COMMAND_R_FORMAT = '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": NAME, "parameters": {...}}]<|END_ACTION|>'
_COMMAND_R_TAGS = ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>", "<|END_THINKING|>")


@register_parser("command_r")
def parse_command_r(text: str) -> ParsedTurn:
    results, pieces, pos = [], [], 0
    while True:  # each <|START_ACTION|> runs to its <|END_ACTION|>, or to the end of the turn
        start = find(text, "<|START_ACTION|>", pos)
        if start == -1:
            break
        lo = start + len("<|START_ACTION|>")
        close = find(text, "<|END_ACTION|>", lo)
        hi = len(text) if close == -1 else close
        pieces.append(text[pos:start])
        items, err = loads(text[lo:hi])
        if err is not None:
            results.append(f"tool calls: invalid JSON ({decode_error(err, at=False)}) in "
                           f"{clip_text(text[lo:hi])!r}; format: {COMMAND_R_FORMAT}")
        else:
            items = items if isinstance(items, list) else [items]
            results += [to_call({"name": o.get("tool_name"), "arguments": o.get("parameters", {})}
                                 if isinstance(o, dict) else o, f"tool call {j}", ("arguments",), COMMAND_R_FORMAT)
                        for j, o in enumerate(items, len(results) + 1)]
        pos = hi if close == -1 else close + len("<|END_ACTION|>")
    pieces.append(text[pos:])
    turn = parsed_turn("".join(pieces), results)
    content = turn.content
    for tag in _COMMAND_R_TAGS:
        content = content.replace(tag, "")
    return ParsedTurn(content.strip(), turn.calls, turn.errors)


_MARKERS = (  # (a marker in the turn or the template, the parser); the first that matches wins
    ("<function=", "qwen3_coder"), ("<arg_key>", "glm45"), ("<|tool_calls_section_begin|>", "kimi_k2"),
    ("to=functions.", "harmony"), ("<｜tool▁call▁begin｜>", "deepseek"), ("[TOOL_CALLS]", "mistral"),
    ("<|START_ACTION|>", "command_r"), ("<tool_call>", "hermes"),
)


_MARKERS = list(_MARKERS)


_TEMPLATE_MARKERS: list[tuple[str, str]] = []  # (a marker only a template's source holds, the parser)


_FALLBACKS: dict[str, str] = {}  # parser -> the one `auto` tries when it finds nothing (a shared marker)


def add_markers(markers, template_markers=(), fallbacks=None) -> None:
    """Put a module's ``(marker, parser)`` pairs before the others (their markers are more specific);
    ``template_markers``: ``(marker, parser)`` pairs naming the parser of a template whose source
    builds its markers from pieces; ``fallbacks``: parser -> the one ``auto`` tries when it reads nothing."""
    _MARKERS[:0] = list(markers)
    _TEMPLATE_MARKERS.extend(template_markers)
    _FALLBACKS.update(fallbacks or {})


def detect(text: str) -> str | None:
    """The format whose marker ``text`` holds (None: none of them)."""
    return next((name for marker, name in _MARKERS if marker in text), None)


@register_parser("auto")
def parse_auto(text: str) -> ParsedTurn:
    """Whichever format the turn is written in (by its markers); a turn with none of them is read
    as ``llama3_json`` (a bare JSON call, or after ``<|python_tag|>``), ``xlam`` (a JSON list of
    ``{"name", "arguments"}`` objects), then ``pythonic``, then (when ``pythonic`` cannot read it)
    ``gemma3_pythonic``. A marker can be text inside another format's argument (a hermes call that
    writes ``<function_call>``): when the first marker's format reads no call, the first other
    reading (another marker's format, then the reading as if there were no marker) with calls, no
    errors and that marker inside its calls (not in its content) is the turn's."""
    from .parser_base import TOOL_PARSERS

    present = [(marker, name) for marker, name in _MARKERS if marker in text]
    if not present:
        return _unmarked(text)
    marker, name = present[0]
    turn = TOOL_PARSERS[name](text)
    if not (turn.calls or turn.errors) and name in _FALLBACKS:
        turn = TOOL_PARSERS[_FALLBACKS[name]](text)
    if turn.calls:
        return turn
    others = dict.fromkeys(other for _, other in present[1:] if other != name)
    for read in [*(TOOL_PARSERS[other] for other in others), _unmarked]:
        found = read(text)
        if found.calls and not found.errors and marker not in found.content:  # the marker was in its calls
            return found
    return turn


def _unmarked(text: str) -> ParsedTurn:
    """``auto``'s reading of a turn with no marker (see :func:`parse_auto`)."""
    from .parser_base import TOOL_PARSERS

    turn = parse_llama3_json(text)
    if turn.calls or turn.errors:
        return turn
    if _xlam_calls(text.strip()):
        return TOOL_PARSERS["xlam"](text)
    turn = parse_pythonic(text)
    if turn.errors:  # gemma-3's pythonic template writes no comma between arguments
        loose = TOOL_PARSERS["gemma3_pythonic"](text)
        return loose if loose.calls and not loose.errors else turn
    return turn


def _xlam_calls(body: str) -> bool:
    """``body`` is a JSON list of objects each with a ``"name"`` and its ``"arguments"``, as xLAM's
    template writes calls (vLLM's rule): a JSON list of records a model answers with is text."""
    if not (body.startswith("[") and body.startswith("{", skip_ws(body, 1))):
        return False
    try:
        items, _ = _DECODER.raw_decode(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(items, list) and all(isinstance(o, dict) and "name" in o and "arguments" in o for o in items)


def parser_for_template(template: str | None) -> str:
    """The parser of the tool-call format a chat template teaches (``hermes`` when it names none)."""
    text = template or ""
    named = next((name for marker, name in _TEMPLATE_MARKERS if marker in text), None)
    if named is not None:
        return named
    found = detect(text) or ("harmony" if "<|call|>" in text else None)
    if found is None and ("<|python_tag|>" in text or '"parameters": dictionary of argument' in text):
        return "llama3_json"
    return found or "hermes"


__all__ = ["detect", "parser_for_template", "add_markers"]
