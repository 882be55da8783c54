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
``pythonic``       ``[add(a=1, b=2), ...]`` (Llama-3.2/4 pythonic)
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

from .parsers import PYTHON_TAG, ParsedTurn, ToolCall, _parsed, _short, _to_call, parse_llama3_json, register_parser

_DECODER = json.JSONDecoder()


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _json_args(name: str, body: str, where: str, fmt: str, call_id: str | None = None):
    try:
        args = json.loads(body) if body.strip() else {}
    except json.JSONDecodeError as err:
        return f"{where} ({name}): invalid JSON arguments ({err.msg}) in {_short(body)!r}; format: {fmt}"
    result = _to_call({"name": name, "arguments": args}, where, ("arguments",), fmt)
    return ToolCall(result.name, result.arguments, call_id) if isinstance(result, ToolCall) else result


def _blocks(text: str, pattern: re.Pattern, read) -> ParsedTurn:
    """Content outside the ``pattern`` matches; ``read(match, index)`` -> a ToolCall, an error line
    or a list of them."""
    results, pieces, pos = [], [], 0
    for index, match in enumerate(pattern.finditer(text), 1):
        pieces.append(text[pos:match.start()])
        found = read(match, index)
        results.extend(found if isinstance(found, list) else [found])
        pos = match.end()
    pieces.append(text[pos:])
    return _parsed("".join(pieces), results)


QWEN3_CODER_FORMAT = "<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>"
_QWEN3_CODER = re.compile(r"<tool_call>\s*<function=([^>\n]+)>(.*?)</function>\s*</tool_call>", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


@register_parser("qwen3_coder")
def parse_qwen3_coder(text: str) -> ParsedTurn:
    def read(m, i):
        return ToolCall(m.group(1).strip(), {k.strip(): _value(v) for k, v in _PARAMETER.findall(m.group(2))})
    return _unclosed(_blocks(text, _QWEN3_CODER, read), "<tool_call>", QWEN3_CODER_FORMAT)


GLM_FORMAT = "<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>"
_GLM = re.compile(r"<tool_call>([^<\n]+)(.*?)</tool_call>", re.S)
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


@register_parser("glm45")
def parse_glm45(text: str) -> ParsedTurn:
    def read(m, i):
        return ToolCall(m.group(1).strip(), {k.strip(): _value(v) for k, v in _GLM_ARG.findall(m.group(2))})
    return _unclosed(_blocks(text, _GLM, read), "<tool_call>", GLM_FORMAT)


def _unclosed(turn: ParsedTurn, opener: str, fmt: str) -> ParsedTurn:
    if opener not in turn.content:
        return turn
    return ParsedTurn(turn.content, turn.calls, [*turn.errors, f"a {opener} that is never closed; format: {fmt}"])


KIMI_FORMAT = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>"
               "{json}<|tool_call_end|><|tool_calls_section_end|>")
_KIMI_SECTION = re.compile(r"<\|tool_calls_section_begin\|>(.*?)(?:<\|tool_calls_section_end\|>|$)", re.S)
_KIMI_CALL = re.compile(r"<\|tool_call_begin\|>\s*(\S+?)\s*<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>",
                        re.S)


@register_parser("kimi_k2")
def parse_kimi_k2(text: str) -> ParsedTurn:
    def read(m, i):
        results = []
        for j, (cid, body) in enumerate(_KIMI_CALL.findall(m.group(1)), i):
            name = cid.split(".", 1)[-1].rsplit(":", 1)[0]
            results.append(_json_args(name, body, f"tool call {j}", KIMI_FORMAT, cid))
        return results or [f"tool call {i}: no <|tool_call_begin|> in the tool calls section; format: {KIMI_FORMAT}"]
    return _blocks(text, _KIMI_SECTION, read)


HARMONY_FORMAT = "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{json}<|call|>"
_HARMONY = re.compile(r"(?:<\|start\|>assistant)?\s*(?:<\|channel\|>\w+\s*)?to=functions\.([\w.\-]+)[^<]*"
                      r"(?:<\|channel\|>[^<]*)?(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(?:<\|call\|>|$)", re.S)
_HARMONY_FINAL = re.compile(r"<\|channel\|>final<\|message\|>(.*?)(?:<\|end\|>|<\|return\|>|$)", re.S)
_HARMONY_ANALYSIS = re.compile(r"<\|channel\|>analysis<\|message\|>(.*?)(?:<\|end\|>|$)", re.S)


@register_parser("harmony")
def parse_harmony(text: str) -> ParsedTurn:
    """Calls on the commentary channel; ``content`` the final channel's text (else the text outside
    calls and analysis), ``reasoning`` the analysis channel's."""
    turn = _blocks(text, _HARMONY, lambda m, i: _json_args(m.group(1), m.group(2), f"tool call {i}", HARMONY_FORMAT))
    final = _HARMONY_FINAL.search(turn.content)
    reasoning = "".join(_HARMONY_ANALYSIS.findall(turn.content)).strip()
    rest = _HARMONY_ANALYSIS.sub("", turn.content).replace("<|start|>assistant", "").strip()
    return ParsedTurn(final.group(1).strip() if final else rest, turn.calls, turn.errors, reasoning)


DEEPSEEK_FORMAT = "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>"
_DEEPSEEK = re.compile(r"<｜tool▁call▁begin｜>(?:function<｜tool▁sep｜>)?([^<\n]+?)\s*(?:<｜tool▁sep｜>)?\s*"
                       r"(?:```json\s*)?(\{.*?\})\s*(?:```\s*)?<｜tool▁call▁end｜>", re.S)
_DEEPSEEK_WRAP = re.compile(r"<｜tool▁calls▁(?:begin|end)｜>")


@register_parser("deepseek")
def parse_deepseek(text: str) -> ParsedTurn:
    turn = _blocks(text, _DEEPSEEK, lambda m, i: _json_args(m.group(1).strip(), m.group(2), f"tool call {i}",
                                                            DEEPSEEK_FORMAT))
    return _unclosed(ParsedTurn(_DEEPSEEK_WRAP.sub("", turn.content).strip(), turn.calls, turn.errors),
                     "<｜tool▁call▁begin｜>", DEEPSEEK_FORMAT)


MISTRAL_FORMAT = '[TOOL_CALLS][{"name": NAME, "arguments": {...}}] or [TOOL_CALLS]NAME[ARGS]{...}'
_MISTRAL_V11 = re.compile(r"\[TOOL_CALLS\]\s*([^\[\s]+)\s*(?:\[CALL_ID\]\s*([A-Za-z0-9]+)\s*)?\[ARGS\]")


@register_parser("mistral")
def parse_mistral(text: str) -> ParsedTurn:
    start = text.find("[TOOL_CALLS]")
    if start == -1:
        return ParsedTurn(text.strip())
    rest = text[start + len("[TOOL_CALLS]"):].lstrip()
    if rest.startswith("["):  # v3: a JSON list
        try:
            items, _ = _DECODER.raw_decode(rest)
        except json.JSONDecodeError as err:
            return _parsed(text[:start], [f"tool calls: invalid JSON ({err.msg}) in {_short(rest)!r}; "
                                          f"format: {MISTRAL_FORMAT}"])
        items = items if isinstance(items, list) else [items]
        results = [_to_call(o, f"tool call {i}", ("arguments", "parameters"), MISTRAL_FORMAT)
                   for i, o in enumerate(items, 1)]
        results = [ToolCall(r.name, r.arguments, o.get("id")) if isinstance(r, ToolCall) else r
                   for r, o in zip(results, items)]
        return _parsed(text[:start], results)
    results, pos = [], start
    for i, m in enumerate(_MISTRAL_V11.finditer(text, start), 1):
        try:
            args, end = _DECODER.raw_decode(text, m.end())
        except json.JSONDecodeError as err:
            results.append(f"tool call {i} ({m.group(1)}): invalid JSON arguments ({err.msg}); format: {MISTRAL_FORMAT}")
            break
        result = _to_call({"name": m.group(1), "arguments": args}, f"tool call {i}", ("arguments",), MISTRAL_FORMAT)
        results.append(ToolCall(result.name, result.arguments, m.group(2)) if isinstance(result, ToolCall) else result)
        pos = end
    if not results:
        results.append(f"a [TOOL_CALLS] without a call after it; format: {MISTRAL_FORMAT}")
    return _parsed(text[:start] + text[pos:] if pos > start else text[:start], results)


PYTHONIC_FORMAT = "[tool_name(arg=value, ...), ...]"


@register_parser("pythonic")
def parse_pythonic(text: str) -> ParsedTurn:
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG):].strip()
    if not re.match(r"\[\s*[A-Za-z_][\w.]*\(", body):
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
    except (SyntaxError, ValueError) as err:
        return _parsed("", [f"tool calls: {err} in {_short(body)!r}; format: {PYTHONIC_FORMAT}"])
    return _parsed("", results)


COMMAND_R_FORMAT = '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": NAME, "parameters": {...}}]<|END_ACTION|>'
_COMMAND_R = re.compile(r"<\|START_ACTION\|>(.*?)(?:<\|END_ACTION\|>|$)", re.S)
_COMMAND_R_TEXT = re.compile(r"<\|(?:START|END)_(?:RESPONSE|THINKING)\|>")


@register_parser("command_r")
def parse_command_r(text: str) -> ParsedTurn:
    def read(m, i):
        try:
            items = json.loads(m.group(1))
        except json.JSONDecodeError as err:
            return [f"tool calls: invalid JSON ({err.msg}) in {_short(m.group(1))!r}; format: {COMMAND_R_FORMAT}"]
        items = items if isinstance(items, list) else [items]
        return [_to_call({"name": o.get("tool_name"), "arguments": o.get("parameters", {})} if isinstance(o, dict)
                         else o, f"tool call {j}", ("arguments",), COMMAND_R_FORMAT) for j, o in enumerate(items, i)]
    turn = _blocks(text, _COMMAND_R, read)
    return ParsedTurn(_COMMAND_R_TEXT.sub("", turn.content).strip(), turn.calls, turn.errors)


_MARKERS = (  # (a marker in the turn or the template, the parser); the first that matches wins
    ("<function=", "qwen3_coder"), ("<arg_key>", "glm45"), ("<|tool_calls_section_begin|>", "kimi_k2"),
    ("to=functions.", "harmony"), ("<｜tool▁call▁begin｜>", "deepseek"), ("[TOOL_CALLS]", "mistral"),
    ("<|START_ACTION|>", "command_r"), ("<tool_call>", "hermes"),
)


def detect(text: str) -> str | None:
    """The format whose marker ``text`` holds (None: none of them)."""
    return next((name for marker, name in _MARKERS if marker in text), None)


@register_parser("auto")
def parse_auto(text: str) -> ParsedTurn:
    """Whichever format the turn is written in (by its markers); a turn with none of them is read
    as ``llama3_json`` (a bare JSON call, or after ``<|python_tag|>``), then ``pythonic``."""
    from .parsers import TOOL_PARSERS

    name = detect(text)
    if name is not None:
        return TOOL_PARSERS[name](text)
    turn = parse_llama3_json(text)
    return turn if turn.calls or turn.errors else parse_pythonic(text)


def parser_for_template(template: str | None) -> str:
    """The parser of the tool-call format a chat template teaches (``hermes`` when it names none)."""
    text = template or ""
    found = detect(text) or ("harmony" if "<|call|>" in text else None)
    if found is None and ("<|python_tag|>" in text or '"parameters": dictionary of argument' in text):
        return "llama3_json"
    return found or "hermes"


__all__ = ["detect", "parser_for_template"]
