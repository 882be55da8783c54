"""One sampled row of a generation as an OpenAI choice: its ids and log-probs, text, stop and tool calls.

* ``max_tokens``: the row is cut to the call's own limit (a wave generates with the group's largest);
* an end-of-turn token ends the choice (``finish_reason: stop``), and is kept in its ids (it was
  sampled, and the chat template renders what follows after it) but not in its text;
* ``stop``: the choice ends at the first stop sequence; its ids are cut after the token that
  completes it (the sampled ids up to there, nothing re-encoded), its text before the sequence;
* with ``tools``, the text is read by ``rollout.multi_turn.tool_parser``: calls become ``tool_calls``
  (``finish_reason: tool_calls``), the rest the message's ``content``; a call that cannot be read
  (or whose arguments are not JSON) stays in the content as written.
"""

from __future__ import annotations

import json
import uuid

from .protocol import Choice


def _cut_at_stop(tokenizer, ids: list[int], text: str, stops: list[str]) -> tuple[list[int], str] | None:
    found = [(text.find(s), s) for s in stops if s in text]
    if not found:
        return None
    pos, stop = min(found)
    need = pos + len(stop)
    lo, hi = 1, len(ids)
    while lo < hi:  # the fewest tokens whose text holds the whole stop sequence
        mid = (lo + hi) // 2
        if len(tokenizer.decode(ids[:mid], skip_special_tokens=False)) >= need:
            hi = mid
        else:
            lo = mid + 1
    return ids[:lo], text[:pos]


def _call_id(index: int, name: str, kimi: bool) -> str:
    return f"functions.{name}:{index}" if kimi else uuid.uuid4().hex[:9]


def _tool_calls(parser, text: str, kimi: bool) -> tuple[str | None, list[dict] | None]:
    """``(content, calls)`` of a turn with calls; ``(None, None)``: the text stays content, as when
    the parser fails or a call's arguments are not JSON (a ``set``: the built-in parsers never return
    one, a user's parser might)."""
    try:
        turn = parser(text)
        if not turn.calls:
            return None, None
        calls = [{"id": c.id or _call_id(i, c.name, kimi), "type": "function",
                  "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                 for i, c in enumerate(turn.calls)]
    except Exception:  # noqa: BLE001 - a user parser that fails, arguments json cannot write: content
        return None, None
    return turn.content or None, calls


def choice_of(tokenizer, gen, row: int, *, limit: int, eos: set[int], stops: list[str],
              parser, token_texts: bool = True) -> tuple[Choice, str | None]:
    """``(choice, end)``: row ``row`` of ``gen`` as a choice, and the end-of-turn text it ended
    with (None: cut by the limit or a stop sequence); each token's text only with ``token_texts``
    (what ``logprobs`` answers show)."""
    valid = gen.response_mask[row].bool()
    ids = gen.response_ids[row][valid].tolist()[:limit]
    if gen.rollout_logprobs is not None:
        logprobs = [float(x) for x in gen.rollout_logprobs[row][valid].tolist()[:limit]]
    else:
        logprobs = [0.0] * len(ids)
    ended = bool(ids) and ids[-1] in eos
    text = tokenizer.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
    finish, end = ("stop", tokenizer.decode(ids[-1:], skip_special_tokens=False)) if ended else ("length", None)
    if stops:
        cut = _cut_at_stop(tokenizer, ids, text, stops)
        if cut is not None:
            ids, text = cut
            logprobs, finish, end = logprobs[:len(ids)], "stop", None
    content, calls = (None, None)
    if parser is not None:
        kimi = "<|tool_call_begin|>" in (getattr(tokenizer, "chat_template", None) or "")
        content, calls = _tool_calls(parser, text, kimi)
        if calls:
            finish, content = "tool_calls", content or ""
    texts = tokenizer.convert_ids_to_tokens(ids) if token_texts else []
    if token_texts and hasattr(tokenizer, "convert_tokens_to_string"):
        texts = [tokenizer.convert_tokens_to_string([t]) for t in texts]
    return Choice(text=text, ids=ids, logprobs=logprobs, finish_reason=finish, token_texts=texts,
                  content=content, tool_calls=calls), end
