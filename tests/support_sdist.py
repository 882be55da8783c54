"""Every chat template of the llama-cpp-python sdist as a conformance family (tests and tools/template_table.py).

``FAMILIES`` (tests/support_realtemplates.py) names, for the families of issue 21, what the model
ships beside its template (special tokens, stop tokens). The sdist holds many more templates;
:func:`sdist_families` makes a family of each of them: the named family where there is one, else
one read off the template itself:

* its special tokens: the marker-like strings the template writes (``<|...|>``, ``<｜...｜>``,
  ``[UPPER_CASE]``, ``[|lower|]``, ``<tag>``, MiniMax's ``]~b]`` / ``[e~[``), single tokens of the byte-level tokenizer;
* its stop token: the first end-like special token the template writes after an assistant turn's
  content, before the next message (what the model's generation config names as eos for these
  families); a Harmony template's are ``<|return|>`` and ``<|call|>`` (``_HARMONY_STOPS``), as gpt-oss's;
* ``bos``/``eos`` tokens ``<s>`` / ``</s>`` where the template reads ``bos_token`` / ``eos_token``.

A template that cannot render a plain conversation with transformers' renderer, or writes no
special token after an assistant turn, is left out with the reason (``skipped``).
"""

from __future__ import annotations

import re
from pathlib import Path

from support_realtemplates import FAMILIES, Family, family_tokenizer

_SPECIAL = re.compile(r"<\|[^|<>\s'\"]{1,40}\|>|<｜[^｜<>\s]{1,40}｜>|\[[A-Z][A-Z_]{1,30}\]|"
                      r"<[A-Za-z_][\w:.\-]{0,30}>|</[A-Za-z_][\w:.\-]{0,30}>|<\|[a-z_]+>|<[a-z_]+\|>|\]~b\]|\[e~\[|\]~!b\[|"
                      r"\[\|[a-z_]{1,30}\|\]")
"""Marker-like strings in a template: ``<|im_end|>``, ``<｜Assistant｜>``, ``[INST]``, ``<think>``,
gemma-4's ``<|turn>`` / ``<turn|>``, MiniMax's ``]~b]``, EXAONE's ``[|endofturn|]``."""

_ENDS = re.compile(r"end|eos|eot|eom|turn\|>|return", re.I)
_CONTENT = re.compile(r"(?<!of_)text|response|thinking|action|think|content|role", re.I)
"""A stop token's name (``<|im_end|>``, ``<seed:eos>``, gemma-4's ``<turn|>``, Granite's ``<|end_of_text|>``),
not the end of a part inside the turn (Cohere's ``<|END_TEXT|>``, ``</think>``, Granite's role header
``<|end_of_role|>``); else a separator (Reka's ``<sep>``)."""
_CALL_STOPS = ("<|tool_response>",)
"""Stop tokens a model's generation config names for ending a call turn inside its own turn (gemma-4)."""
_HARMONY_STOPS = ("<|return|>", "<|call|>")
"""Harmony's stop tokens (openai_harmony's ``stop_tokens_for_assistant_actions``; gpt-oss's generation
config): a final answer ends with ``<|return|>``, a call with ``<|call|>``. Its ``<|end|>`` closes a
message *inside* the turn (the analysis channel before the final one; every message once it is
history): a model stopped there never writes its answer."""
_HTML = {"<br>", "<p>", "</p>", "<b>", "</b>", "<i>", "</i>", "<code>", "</code>", "<s>", "</s>"}
_MARK, _NEXT = "steadyrl-sdist-content", "steadyrl-sdist-next"


def _specials(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t for t in _SPECIAL.findall(text) if t not in _HTML))


def infer_family(path: Path) -> Family | str:
    """The family of a template the suite does not name, read off the template (module docstring);
    a string: why it is left out."""
    text = path.read_text()
    specials = _specials(text)
    family = Family(path.stem, path.name, "</s>", ("</s>",), bos="<s>", specials=specials)
    tok = family_tokenizer(family, path.parent)
    try:  # a user message after the turn: a template may close only the turns a message follows (Apriel-1.6)
        rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant",
                                            "content": _MARK}, {"role": "user", "content": _NEXT}], tokenize=False)
    except Exception as err:  # noqa: BLE001 - a template may raise anything
        return f"does not render a plain conversation: {type(err).__name__}: {str(err)[:80]}"
    after = rendered.split(_MARK, 1)[-1].split(_NEXT, 1)[0] if _MARK in rendered else ""
    found = sorted((after.find(t), -len(t), t) for t in (*specials, "</s>") if t in after)
    if _MARK not in rendered or not found:
        return "writes no special token after an assistant turn (no stop token to end one)"
    ends = [t for _, _, t in found if _ENDS.search(t) and not _CONTENT.search(t)]
    seps = [t for _, _, t in found if "sep" in t.lower()]
    stop = (ends or seps or [found[0][2]])[0]
    if "<|channel|>" in specials and all(t in specials for t in _HARMONY_STOPS):  # gpt-oss's training variants
        return Family(path.stem, path.name, _HARMONY_STOPS[0], (*_HARMONY_STOPS, "</s>"), bos="<s>", specials=specials)
    # a template with no closer ends a turn with the next role token (GLM): tool results come after its own
    roles = ("<|observation|>",) if stop == "<|user|>" and "<|observation|>" in specials else ()
    # gemma-4 writes a call's result inside the model's turn, after <|tool_response>: its generation
    # config stops there too (eos ids <turn|>, <|tool_response>), so a call turn ends with it
    calls = tuple(t for t in _CALL_STOPS if t in specials)
    return Family(path.stem, path.name, stop, tuple(dict.fromkeys((stop, *roles, *calls, "</s>"))), bos="<s>",
                  specials=specials)


def sdist_families(templates: Path) -> tuple[list[Family], dict[str, str]]:
    """(a family per template of the sdist, the named ones first; {template file: why skipped})."""
    named = {f.template for f in FAMILIES}
    families, skipped = list(FAMILIES), {}
    for path in sorted(templates.glob("*.jinja")):
        if path.name in named:
            continue
        found = infer_family(path)
        if isinstance(found, str):
            skipped[path.name] = found
        else:
            families.append(found)
    return families, skipped
