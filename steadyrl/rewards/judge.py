"""The ``llm_judge`` built-in: a language model reads the prompt, the completion (and the gold
answer) through a template and replies with a score.

For sample ``i`` the judge's message is ``template`` with ``{prompt}``, ``{completion}`` and
``{answer}`` replaced (other braces are left as they are, so JSON in a template is fine). The
score is read from the reply by :class:`ScoreParser`::

    x   = float(first group of `pattern`)     (default pattern: the last number in the reply)
    x  in [min_score, max_score], else the sample scores None (reason out_of_range)
    r_i = (x - min_score) / (max_score - min_score)     with scale (default), else x

Two backends:

* ``backend: openai`` (default): an OpenAI-compatible chat-completions endpoint (``base_url``
  e.g. ``http://localhost:8000/v1`` for vLLM / SGLang servers, ``model``); the API key is read
  from the environment variable *named* by ``api_key_env`` (never written in the config).
  ``concurrency`` requests at a time (a thread pool), each retried with back-off and bounded by
  ``request_timeout_s`` (:mod:`steadyrl.rewards.http_client`). Scored in a thread by default.
* ``backend: local``: a causal LM (hub name or directory) generating greedily with transformers on
  the trainer's device, ``batch_size`` judge prompts at a time
  (:mod:`steadyrl.rewards.judge_local`). Scored inline by default, like ``reward_model``.

``mode: rubric`` asks the judge one weighted criterion at a time instead (``rubric_template`` with
``{criterion}``; the criteria fixed in the options or a column per row) and scores the weighted share
of criteria passed: :mod:`steadyrl.rewards.rubric`.

A sample the judge fails on (the request failed after its retries, a reply without a score, a
missing gold answer where the template asks for one) scores ``None``: only that sample is left out,
and the reason is counted (``reward/llm_judge/failures/<reason>``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..errors import ConfigError
from .cached import CachedReward
from .http_client import RequestFailed, api_key_from_env, check_reachable, checked_url, post_json
from .params import Caching, Endpoint, LocalModel, RequestLimits
from .registry import register_reward
from .rubric import Rubric
from .judge_base import DEFAULT_TEMPLATE, RUBRIC_TEMPLATE, JudgeBase, Judging, ScoreParser, fill_template  # noqa: F401

__all__ = ["ScoreParser", "Judging", "fill_template", "HttpJudge", "llm_judge", "judging_of", "DEFAULT_TEMPLATE",
           "RUBRIC_TEMPLATE", "RUBRIC_MAX_NEW_TOKENS", "SCORE_MAX_NEW_TOKENS"]
SCORE_MAX_NEW_TOKENS = 16
"""The judge's reply length in score mode (``max_new_tokens: null``): a number."""
RUBRIC_MAX_NEW_TOKENS = 1024
"""The judge's reply length in rubric mode (``max_new_tokens: null``): room to reason before its last
line, the verdict (a reply cut before it holds no verdict and scores 0)."""


class HttpJudge(JudgeBase, CachedReward):
    """``llm_judge`` with ``backend: openai``: one chat-completions request per sample."""

    def __init__(self, judging: Judging, endpoint: Endpoint, limits: RequestLimits, caching: Caching, *, model: str):
        """``model``: the served model's name, sent in every request."""
        CachedReward.__init__(self, "llm_judge", cache_size=caching.size, answer_key=caching.answer_key)
        self.setup_judge(judging, caching.answer_key)
        base_url = endpoint.url
        if not isinstance(base_url, str) or not base_url:
            raise ConfigError("llm_judge reward: backend 'openai' needs the option base_url (e.g. "
                              "http://localhost:8000/v1)")
        base_url = checked_url("llm_judge reward: option base_url", base_url)
        self.url, self.model = base_url.rstrip("/") + "/chat/completions", model
        self.headers = {}
        if endpoint.api_key_env is not None:
            self.headers["Authorization"] = "Bearer " + api_key_from_env("llm_judge", endpoint.api_key_env)
        self.limits = limits
        if endpoint.check_url:
            check_reachable("llm_judge reward: option base_url", base_url)

    def __repr__(self) -> str:  # never shows the headers (the key)
        return f"HttpJudge(url={self.url!r}, model={self.model!r})"

    def _reply(self, messages: list[dict]) -> str:
        body = {"model": self.model, "messages": messages, "temperature": 0.0,
                "max_tokens": self.judging.max_new_tokens}
        limits = self.limits
        reply = post_json(self.url, body, headers=self.headers, timeout_s=limits.request_timeout_s,
                          retries=limits.retries, backoff_s=limits.backoff_s)
        try:
            return str(reply["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError):
            raise RequestFailed("bad_reply", f"not a chat-completions reply: {str(reply)[:80]}") from None

    def _judge_one(self, prompt, completion, answer) -> float | None:
        try:
            return self.parser.parse(self._reply(self.messages(prompt, completion, answer)))
        except RequestFailed as err:
            self.count_failure(err.reason)
            return None

    def _ask_one(self, messages: list[dict]):
        try:
            return self._reply(messages)
        except RequestFailed as err:
            return err

    def _ask(self, questions: list[list[dict]]) -> list:
        with ThreadPoolExecutor(max_workers=min(self.limits.concurrency, max(1, len(questions)))) as pool:
            return list(pool.map(self._ask_one, questions))

    def score_new(self, prompts: list, completions: list, columns: dict) -> list:
        if self.rubric is not None:
            return self.score_rubric(prompts, completions, columns, self._ask)
        answers = columns.get(self.answer_key) or [None] * len(completions)
        with ThreadPoolExecutor(max_workers=min(self.limits.concurrency, max(1, len(completions)))) as pool:
            return list(pool.map(self._judge_one, prompts, completions, answers))


def judging_of(options) -> Judging:
    """What the judge is asked, from the checked options (a
    :class:`~steadyrl.config.reward_options.LlmJudgeOptions`): the score parser, the rubric in rubric
    mode (and its template), and the reply's length (``max_new_tokens: null``: :data:`SCORE_MAX_NEW_TOKENS`
    or :data:`RUBRIC_MAX_NEW_TOKENS`)."""
    o = options
    parser = ScoreParser(o.pattern, o.min_score, o.max_score, o.scale)
    if o.mode != "rubric":
        return Judging(o.template, o.system_prompt, parser, o.max_new_tokens or SCORE_MAX_NEW_TOKENS)
    criteria = None if o.criteria is None else [c.model_dump() for c in o.criteria]
    return Judging(o.rubric_template, o.system_prompt, parser, o.max_new_tokens or RUBRIC_MAX_NEW_TOKENS,
                   Rubric(criteria, o.criteria_key))


@register_reward("llm_judge")
def llm_judge(**options):
    """An LLM judge's score of each completion (module docstring); ``options``:
    :class:`steadyrl.config.reward_options.LlmJudgeOptions`, whose names and defaults they are, grouped
    once into the judge's parameter objects (:class:`Judging`, :mod:`steadyrl.rewards.params`)."""
    from ..config.reward_options import checked_options  # steadyrl.config imports the rewards

    o = checked_options("llm_judge", options)
    judging, caching = judging_of(o), Caching.of(o)
    if o.backend == "local":
        from .judge_local import LocalJudge

        return LocalJudge(judging, LocalModel.of(o), caching, batch_size=o.batch_size)
    return HttpJudge(judging, Endpoint(o.base_url, o.api_key_env, o.check_url), RequestLimits.of(o), caching,
                     model=o.model)
