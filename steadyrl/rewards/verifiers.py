"""Text built-ins: ``exact_match``, ``normalized_match``, ``regex_format`` and ``length_penalty``.

Each is a factory registered by name; it checks its options once (a bad option is a
:class:`~steadyrl.errors.ConfigError` naming it) and returns a reward function. The math verifier
lives in :mod:`steadyrl.rewards.math_verifier`.

Answer extraction shared by the two match rewards (options ``marker`` and ``last_line``, at most
one of them):

* ``marker="Answer:"``: the completion's answer is the rest of the line after the *last*
  occurrence of the marker; a completion without the marker scores 0. The gold answer is cut the
  same way when it contains the marker (``"... #### 72"`` gives ``"72"``), else used whole.
* ``last_line=True``: the completion's answer is its last non-blank line.

A sample whose gold answer is missing (``None``) scores ``None``: a data problem, not a wrong
completion.
"""

from __future__ import annotations

import re
from typing import Literal

from ..errors import ConfigError
from .registry import RewardFn, register_reward

__all__ = [
    "exact_match",
    "normalized_match",
    "regex_format",
    "length_penalty",
    "normalize_answer",
    "extract_answer",
]

TRAILING_PUNCTUATION = ".,;:!?。"
"""Characters ``normalize_answer`` strips from the end of an answer."""


def gold_column(columns: dict, answer_key: str, reward: str) -> list:
    if answer_key not in columns:
        raise KeyError(
            f"the {reward} reward reads the gold answer from column {answer_key!r}, "
            f"but the batch has columns {sorted(columns)}; set the option answer_key"
        )
    return columns[answer_key]


def _rest_of_line(text: str, marker: str) -> str | None:
    at = text.rfind(marker)
    if at < 0:
        return None
    return text[at + len(marker) :].split("\n", 1)[0]


def extract_answer(text: str, *, marker: str | None = None, last_line: bool = False) -> str | None:
    """The answer part of a completion (see the module docstring); ``None`` when it has none."""
    if marker is not None:
        return _rest_of_line(text, marker)
    if last_line:
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-1] if lines else None
    return text


def _gold_answer(gold, marker: str | None) -> str | None:
    if gold is None:
        return None
    gold = str(gold)
    if marker is not None and marker in gold:
        return _rest_of_line(gold, marker)
    return gold


def normalize_answer(text: str) -> str:
    """Strip, case-fold, collapse runs of whitespace to one space, drop trailing punctuation."""
    text = " ".join(text.casefold().split())
    return text.rstrip(TRAILING_PUNCTUATION).rstrip()


def _check_extraction(reward: str, marker: str | None, last_line: bool) -> None:
    if marker is not None and (not isinstance(marker, str) or not marker):
        raise ConfigError(f"{reward} reward: option marker={marker!r} must be a non-empty string or None")
    if marker is not None and last_line:
        raise ConfigError(
            f"{reward} reward: options marker={marker!r} and last_line=True exclude each other; give one"
        )


def _match_reward(reward: str, answer_key: str, marker: str | None, last_line: bool, norm) -> RewardFn:
    _check_extraction(reward, marker, last_line)

    def score(prompts: list[str], completions: list[str], **columns) -> list[float | None]:
        golds = gold_column(columns, answer_key, reward)
        out: list[float | None] = []
        for completion, gold in zip(completions, golds, strict=True):
            gold = _gold_answer(gold, marker)
            if gold is None:
                out.append(None)
                continue
            answer = extract_answer(completion, marker=marker, last_line=last_line)
            out.append(1.0 if answer is not None and norm(answer) == norm(gold) else 0.0)
        return out

    score.__name__ = reward
    score.reads_columns = (answer_key,)  # checked against the data before the run starts
    return score


@register_reward("exact_match")
def exact_match(
    *, answer_key: str = "answer", marker: str | None = None, last_line: bool = False, strip: bool = True
) -> RewardFn:
    """1.0 when the completion's answer equals the gold answer (after ``str.strip`` if ``strip``)."""
    return _match_reward(
        "exact_match", answer_key, marker, last_line, (lambda s: s.strip()) if strip else (lambda s: s)
    )


@register_reward("normalized_match")
def normalized_match(
    *, answer_key: str = "answer", marker: str | None = None, last_line: bool = False
) -> RewardFn:
    """1.0 when the answers are equal after :func:`normalize_answer` (``"  The  Cat. "`` == ``"the cat"``)."""
    return _match_reward("normalized_match", answer_key, marker, last_line, normalize_answer)


_FLAGS_VALID = "IGNORECASE, MULTILINE, DOTALL, VERBOSE, ASCII (or I, M, S, X, A), joined by '|', or their integer sum"


def _regex_flags(flags: str | int) -> int:
    if isinstance(flags, int) and not isinstance(flags, bool):
        if flags < 0 or flags & ~int(sum(re.RegexFlag.__members__.values())):
            raise ConfigError(f"regex_format reward: option flags={flags!r} is not a sum of re flags; valid: "
                              f"{_FLAGS_VALID}")
        return flags
    value = 0
    for name in re.split(r"[|,\s]+", flags.strip()):
        if not name:
            continue
        flag = getattr(re.RegexFlag, name.upper(), None)
        if not isinstance(flag, re.RegexFlag):
            raise ConfigError(
                f"regex_format reward: option flags={flags!r} has unknown flag {name!r}; valid: {_FLAGS_VALID}"
            )
        value |= flag
    return value


@register_reward("regex_format")
def regex_format(
    *,
    pattern: str,
    flags: str | int = "DOTALL",
    mode: Literal["match", "search", "fullmatch"] = "match",
    strip: bool = True,
) -> RewardFn:
    """1.0 when the completion matches ``pattern`` (e.g. ``<think>.*</think>\\s*<answer>.*</answer>``).

    ``mode`` picks ``re.match`` (anchored at the start, TRL's format reward), ``re.search`` or
    ``re.fullmatch``; ``flags`` default to ``DOTALL`` so ``.`` crosses lines; ``strip`` strips the
    completion first. Types, ``mode`` and a non-empty ``pattern`` are checked by
    :class:`steadyrl.config.reward_options.RegexFormatOptions`; what the flags and pattern mean, here.
    """
    flag_bits = _regex_flags(flags)
    try:
        compiled = re.compile(pattern, flag_bits)
    except re.error as err:
        raise ConfigError(
            f"regex_format reward: option pattern={pattern!r} is not a valid regular expression ({err})"
        ) from None
    except ValueError as err:  # LOCALE: a flag that does not go with a text pattern
        raise ConfigError(f"regex_format reward: option flags={flags!r} does not go with a text pattern ({err}); "
                          f"valid: {_FLAGS_VALID}") from None
    matcher = getattr(compiled, mode)

    def regex_format(prompts: list[str], completions: list[str], **columns) -> list[float | None]:
        return [1.0 if matcher(c.strip() if strip else c) else 0.0 for c in completions]

    return regex_format


def _load_tokenizer(tokenizer):
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(tokenizer)
        except Exception as err:  # noqa: BLE001 - any loading failure is a configuration problem
            raise ConfigError(
                f"length_penalty reward: option tokenizer={tokenizer!r} cannot be loaded ({err})"
            ) from None
    if not callable(tokenizer):
        raise ConfigError(
            f"length_penalty reward: option tokenizer must be a Hugging Face tokenizer or a path to one, "
            f"got {type(tokenizer).__name__}"
        )
    return tokenizer


@register_reward("length_penalty")
def length_penalty(
    *,
    target_length: int,
    max_length: int,
    unit: Literal["chars", "words", "tokens"] = "chars",
    tokenizer=None,
) -> RewardFn:
    """A penalty in ``[-1, 0]`` that grows linearly past ``target_length``::

        penalty(L) = -clip((L - target_length) / (max_length - target_length), 0, 1)

    0 up to the target, -1 from ``max_length`` on (DAPO's overlong penalty has this shape).
    ``L`` counts characters, whitespace-separated words, or tokens (``unit="tokens"`` needs
    ``tokenizer``: a Hugging Face tokenizer or a local path to one; special tokens not counted).
    """
    # the options (types, ranges, max_length > target_length, tokenizer with unit: tokens) are
    # checked by steadyrl.config.reward_options.LengthPenaltyOptions
    tok = _load_tokenizer(tokenizer) if unit == "tokens" else None
    span = float(max_length - target_length)

    def lengths(completions: list[str]) -> list[int]:
        if unit == "chars":
            return [len(c) for c in completions]
        if unit == "words":
            return [len(c.split()) for c in completions]
        return [len(ids) for ids in tok(list(completions), add_special_tokens=False)["input_ids"]]

    def length_penalty(prompts: list[str], completions: list[str], **columns) -> list[float | None]:
        return [0.0 - min(max((n - target_length) / span, 0.0), 1.0) for n in lengths(completions)]

    return length_penalty
