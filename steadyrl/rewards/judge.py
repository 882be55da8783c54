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
from .cached import DEFAULT_CACHE_SIZE, CachedReward
from .http_client import RequestFailed, api_key_from_env, check_reachable, checked_url, post_json
from .registry import register_reward
from .rubric import Rubric
from .judge_base import DEFAULT_TEMPLATE, RUBRIC_TEMPLATE, JudgeBase, ScoreParser, fill_template  # noqa: F401

__all__ = ["ScoreParser", "fill_template", "HttpJudge", "llm_judge", "DEFAULT_TEMPLATE", "RUBRIC_TEMPLATE"]
class HttpJudge(JudgeBase, CachedReward):
    """``llm_judge`` with ``backend: openai``: one chat-completions request per sample."""

    def __init__(self, *, base_url: str, model: str, api_key_env: str | None, parser: ScoreParser, template: str,
                 system_prompt, answer_key: str, max_new_tokens: int, concurrency: int, retries: int,
                 backoff_s: float, request_timeout_s: float, check_url: bool, cache_size: int,
                 rubric: Rubric | None = None, rubric_template: str = RUBRIC_TEMPLATE):
        CachedReward.__init__(self, "llm_judge", cache_size=cache_size, answer_key=answer_key)
        self.setup_judge(template, parser, system_prompt, answer_key, rubric, rubric_template)
        if not isinstance(base_url, str) or not base_url:
            raise ConfigError("llm_judge reward: backend 'openai' needs the option base_url (e.g. "
                              "http://localhost:8000/v1)")
        base_url = checked_url("llm_judge reward: option base_url", base_url)
        self.url, self.model = base_url.rstrip("/") + "/chat/completions", model
        self.headers = {}
        if api_key_env is not None:
            self.headers["Authorization"] = "Bearer " + api_key_from_env("llm_judge", api_key_env)
        self.max_new_tokens, self.concurrency, self.retries = max_new_tokens, concurrency, retries
        self.backoff_s, self.request_timeout_s = float(backoff_s), float(request_timeout_s)
        if check_url:
            check_reachable("llm_judge reward: option base_url", base_url)

    def __repr__(self) -> str:  # never shows the headers (the key)
        return f"HttpJudge(url={self.url!r}, model={self.model!r})"

    def _reply(self, messages: list[dict]) -> str:
        body = {"model": self.model, "messages": messages, "temperature": 0.0, "max_tokens": self.max_new_tokens}
        reply = post_json(self.url, body, headers=self.headers, timeout_s=self.request_timeout_s,
                          retries=self.retries, backoff_s=self.backoff_s)
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
        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(questions)))) as pool:
            return list(pool.map(self._ask_one, questions))

    def score_new(self, prompts: list, completions: list, columns: dict) -> list:
        if self.rubric is not None:
            return self.score_rubric(prompts, completions, columns, self._ask)
        answers = columns.get(self.answer_key) or [None] * len(completions)
        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(completions)))) as pool:
            return list(pool.map(self._judge_one, prompts, completions, answers))


@register_reward("llm_judge")
def llm_judge(*, backend: str = "openai", model: str, base_url: str | None = None, api_key_env: str | None = None,
              template: str = DEFAULT_TEMPLATE, system_prompt: str | None = None, pattern: str | None = None,
              min_score: float = 0, max_score: float = 10, scale: bool = True, answer_key: str = "answer",
              max_new_tokens: int = 16, concurrency: int = 8, retries: int = 3, backoff_s: float = 1.0,
              request_timeout_s: float = 30.0, check_url: bool = True, batch_size: int = 8,
              revision: str | None = None, device: str = "auto", dtype: str = "auto",
              cache_size: int = DEFAULT_CACHE_SIZE, mode: str = "score", criteria: list | None = None,
              criteria_key: str | None = None, rubric_template: str = RUBRIC_TEMPLATE):
    """An LLM judge's score of each completion (module docstring)."""
    parser = ScoreParser(pattern, min_score, max_score, scale)  # options checked: LlmJudgeOptions
    rubric = Rubric(criteria, criteria_key) if mode == "rubric" else None
    judged = {"rubric": rubric, "rubric_template": rubric_template}
    if backend == "local":
        from .judge_local import LocalJudge

        return LocalJudge(model=model, revision=revision, device=device, dtype=dtype, parser=parser,
                          template=template, system_prompt=system_prompt, answer_key=answer_key,
                          max_new_tokens=max_new_tokens, batch_size=batch_size, cache_size=cache_size, **judged)
    return HttpJudge(base_url=base_url, model=model, api_key_env=api_key_env, parser=parser, template=template,
                     system_prompt=system_prompt, answer_key=answer_key, max_new_tokens=max_new_tokens,
                     concurrency=concurrency, retries=retries, backoff_s=backoff_s,
                     request_timeout_s=request_timeout_s, check_url=check_url, cache_size=cache_size, **judged)
