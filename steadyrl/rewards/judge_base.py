"""What both backends of ``llm_judge`` share (:mod:`.judge` for the HTTP one, :mod:`.judge_local` for
the local one): the default templates, filling a template, reading a score from a reply
(:class:`ScoreParser`), what the judge is asked (:class:`Judging`, built once from the options), and
:class:`JudgeBase`'s judge messages and rubric scoring. The formulas are in :mod:`.judge`'s docstring.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..config.reward_options import JUDGE_TEMPLATE as DEFAULT_TEMPLATE
from ..config.reward_options import RUBRIC_TEMPLATE
from ..errors import ConfigError
from .http_client import RequestFailed
from .reward_model import message_text
from .rubric import Rubric, defuse_verdicts

__all__ = ["ScoreParser", "Judging", "JudgeBase", "fill_template", "DEFAULT_TEMPLATE", "RUBRIC_TEMPLATE"]

_PLACEHOLDER = re.compile(r"\{(prompt|completion|answer|criterion)\}")
_NUMBER = r"(-?\d+(?:\.\d+)?)"


def fill_template(template: str, prompt, completion, answer, criterion: str | None = None) -> str:
    """``template`` with ``{prompt}``, ``{completion}``, ``{answer}`` (and ``{criterion}`` when given)
    replaced, in one pass: a value holding a placeholder is not filled again. With a criterion (rubric
    mode) the completion's ``verdict:`` labels are defused (:func:`~steadyrl.rewards.rubric.defuse_verdicts`)."""
    text = message_text(completion)
    values = {"prompt": message_text(prompt), "completion": text if criterion is None else defuse_verdicts(text),
              "answer": str(answer),
              "criterion": "{criterion}" if criterion is None else criterion}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


class ScoreParser:
    """A judge's reply -> score (module docstring); :meth:`parse` raises ``RequestFailed`` with
    reason ``parse`` or ``out_of_range``."""

    def __init__(self, pattern: str | None, min_score: float, max_score: float, scale: bool):
        # types and max_score > min_score: steadyrl.config.reward_options.LlmJudgeOptions
        self.min, self.max = float(min_score), float(max_score)
        self.scale, self.last_number = bool(scale), pattern is None
        try:
            self.regex = re.compile(pattern or _NUMBER, re.DOTALL)
        except re.error as err:
            raise ConfigError(f"llm_judge reward: option pattern={pattern!r} is not a valid regular expression "
                              f"({err})") from None
        if self.regex.groups != 1:
            raise ConfigError(f"llm_judge reward: option pattern={pattern!r} must have exactly one group (the "
                              f"number), it has {self.regex.groups}")

    def parse(self, reply: str) -> float:
        found = self.regex.findall(reply)
        if not found:
            raise RequestFailed("parse", f"no score in the judge's reply {reply[:80]!r}")
        text = found[-1] if self.last_number else found[0]
        try:
            x = float(text)
        except ValueError:
            raise RequestFailed("parse", f"the pattern's group {text!r} is not a number") from None
        if not self.min <= x <= self.max:
            raise RequestFailed("out_of_range", f"score {x:g} is outside [{self.min:g}, {self.max:g}]")
        return (x - self.min) / (self.max - self.min) if self.scale else x


@dataclass(frozen=True)
class Judging:
    """What the judge is asked and how its reply is read, the same for both backends: the user
    message ``template`` (``rubric_template`` in rubric mode, with ``rubric`` its criteria; score
    mode: ``rubric`` None), a ``system_prompt`` before it, the reply's length ``max_new_tokens``
    and the ``parser`` that reads the score (score mode)."""

    template: str
    system_prompt: str | None
    parser: ScoreParser
    max_new_tokens: int
    rubric: Rubric | None = None

    def __post_init__(self):
        if self.rubric is not None:
            if not isinstance(self.template, str) or not all(
                    key in self.template for key in ("{completion}", "{criterion}")):
                raise ConfigError("llm_judge reward: option rubric_template must be a string containing "
                                  "{completion} and {criterion} (and usually {prompt})")
        elif not isinstance(self.template, str) or "{completion}" not in self.template:
            raise ConfigError("llm_judge reward: option template must be a string containing {completion} "
                              "(and usually {prompt}, {answer})")


class JudgeBase:
    """What both backends share: the template, the parser, and the per-sample judge messages."""

    def setup_judge(self, judging: Judging, answer_key: str):
        """``judging``: what the judge is asked; ``answer_key``: the gold answer's column, read when the
        template asks for ``{answer}``."""
        self.judging, self.rubric = judging, judging.rubric
        self.template, self.parser, self.system_prompt = judging.template, judging.parser, judging.system_prompt
        self.needs_answer = "{answer}" in self.template
        wanted = (answer_key,) if self.needs_answer else ()
        rubric = self.rubric
        self.reads_columns = wanted + ((rubric.key,) if rubric is not None and rubric.key else ())

    def messages(self, prompt, completion, answer, criterion: str | None = None) -> list[dict]:
        if answer is None and self.needs_answer:
            raise RequestFailed("no_answer", "the template asks for {answer} and the sample has none")
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        text = fill_template(self.template, prompt, completion, answer, criterion)
        return system + [{"role": "user", "content": text}]

    def score_rubric(self, prompts: list, completions: list, columns: dict, ask) -> list:
        """Rubric mode: every (row, criterion) question asked at once through ``ask(list of messages)
        -> list of reply texts or RequestFailed``, then each row's weighted score."""
        answers = columns.get(self.answer_key) or [None] * len(completions)
        scores: list = [None] * len(completions)
        rows, questions = [], []
        for i, (p, c, a) in enumerate(zip(prompts, completions, answers)):
            try:
                criteria = self.rubric.criteria_of(columns, i)
                asked = [self.messages(p, c, a, text) for text, _ in criteria]
            except RequestFailed as err:
                self.count_failure(err.reason)
                continue
            rows.append((i, criteria, len(questions)))
            questions.extend(asked)
        replies = ask(questions) if questions else []
        for i, criteria, start in rows:
            try:
                scores[i] = self.rubric.combine(criteria, replies[start:start + len(criteria)])
            except RequestFailed as err:
                self.count_failure(err.reason)
        return scores

    def metrics(self) -> dict[str, float]:
        """The cached reward's metrics, and in rubric mode the criteria's pass rates."""
        out = super().metrics()
        return out if self.rubric is None else {**out, **self.rubric.metrics()}
