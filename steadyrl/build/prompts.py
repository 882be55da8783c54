"""A run's prompts: rendered (chat template, tools' schemas) and tokenized, checked against the model.

* :func:`prompt_options` — how prompts are rendered (a multi-turn episode is a conversation);
* :func:`tokenize_prompts` — the model's :class:`Prompts`: its tokenizer, the run's agent (built
  first: its tools go into the template) and the training and held-out prompts of the checked
  records, by source with ``data.train_sources`` / ``eval_sources``; returned, nothing filled in;
* :func:`check_context_length` — the longest prompt plus its response budget fits the model;
* :func:`named_template_errors` — a chat template's failure names the config key behind it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from .agent import build_agent
from ..config.schema import Config
from ..data.prompts import PromptItem, prepare_prompts
from ..errors import ConfigError
from ..models import load_tokenizer
from .sources import tokenize_parts


def build_tokenizer(config: Config, model_path: str):
    m = config.model
    return load_tokenizer(m.tokenizer or model_path, revision=m.revision, trust_remote_code=m.trust_remote_code,
                          field="model.tokenizer" if m.tokenizer else "model.name_or_path")


def prompt_options(config: Config, agent) -> dict:
    """How prompts are rendered: a multi-turn episode is a conversation, so its string prompts are
    user messages of the chat template (``data.chat_template`` null means true there), and the
    tools' schemas go to the template."""
    chat_template = config.data.chat_template
    if config.rollout.multi_turn:
        if chat_template is False:
            raise ConfigError("data.chat_template = false, but rollout.tools / rollout.environment make every "
                              "episode a conversation, which only the chat template can render; set "
                              "data.chat_template to true or null")
        chat_template = True
    return {"max_prompt_tokens": config.data.max_prompt_tokens, "chat_template": chat_template,
            "tools": agent.tool_schemas if agent is not None else None, "template_kwargs": config.data.chat_template_kwargs}


@contextmanager
def named_template_errors(config: Config):
    """A chat template's failure (raised deep in data.chat or agents.chat) prefixed with the config
    key behind it: the template variables when set (the usual cause), else ``data.chat_template``."""
    from ..agents.chat import TemplateError
    from ..data.chat import ChatTemplateError

    try:
        yield
    except (ChatTemplateError, TemplateError) as err:
        kwargs = config.data.chat_template_kwargs
        key = f"data.chat_template_kwargs = {kwargs!r}" if kwargs else "data.chat_template"
        raise type(err)(f"{key}: {err}") from None


@dataclass
class Prompts:
    """What a task's model hooks return (:class:`~.task.Task`): the model to load, its tokenizer, the
    run's agent (built with the tokenizer; its owner shuts it down) and the prompts tokenized with
    it (``train_parts``: per source with ``data.train_sources``; ``eval_sets`` with
    ``data.eval_sources``; ``dropped``: training prompts too long to keep)."""

    model_path: str
    tokenizer: object
    agent: object | None
    train_prompts: list[PromptItem]
    eval_prompts: list[PromptItem]
    dropped: int = 0
    train_parts: list | None = None
    eval_sets: dict[str, list[PromptItem]] | None = None


def tokenize_prompts(config: Config, model_path: str, inputs) -> Prompts:
    """The :class:`Prompts` of the model at ``model_path`` for the checked records of ``inputs``
    (:class:`~.setup.Inputs`, only read). The agent is built first; a failure after it shuts it down."""
    tokenizer = build_tokenizer(config, model_path)
    with named_template_errors(config):
        agent = build_agent(config, tokenizer)
        try:
            return _render_prompts(config, model_path, tokenizer, agent, inputs)
        except BaseException:
            if agent is not None:
                agent.shutdown()
            raise


def _render_prompts(config: Config, model_path: str, tokenizer, agent, inputs) -> Prompts:
    options = prompt_options(config, agent)
    train_parts, eval_sets = None, None
    if inputs.train_parts is None:
        train, dropped = prepare_prompts(inputs.train_records, tokenizer, source="data.train_path", **options)
    else:  # each source on its own: the mixture samples from each source's prompts
        train_parts, dropped = tokenize_parts(inputs.train_parts, "data.train_sources", tokenizer, options)
        train = [item for part in train_parts for item in part.records]
    if inputs.eval_parts is None:
        evals, _ = prepare_prompts(inputs.eval_records, tokenizer, source="data.eval_path", **options)
    else:
        parts, _ = tokenize_parts(inputs.eval_parts, "data.eval_sources", tokenizer, options)
        eval_sets = {p.name: p.records for p in parts}
        evals = [item for p in parts for item in p.records]
    return Prompts(model_path=model_path, tokenizer=tokenizer, agent=agent, train_prompts=train, eval_prompts=evals,
                   dropped=dropped, train_parts=train_parts, eval_sets=eval_sets)


def check_context_length(config: Config, model_path: str, train_prompts: list[PromptItem],
                         eval_prompts: list[PromptItem]) -> None:
    """The longest prompt plus the response length it is generated with (``rollout.max_new_tokens``;
    for the held-out prompts ``eval.max_new_tokens`` when set) must fit the model's positions (a
    model with learned positions, GPT-2 for one, otherwise fails with an index error mid-run)."""
    from transformers import AutoConfig

    m = config.model
    model_config = AutoConfig.from_pretrained(model_path, revision=m.revision,
                                              trust_remote_code=m.trust_remote_code)
    text_config = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    limit = getattr(text_config, "max_position_embeddings", None) or getattr(text_config, "n_positions", None)
    if not limit:
        return
    ro, eval_tokens = config.rollout, config.eval.max_new_tokens
    if ro.multi_turn:  # every episode, held-out ones too, may use its whole token budget
        checks = [("rollout.max_episode_tokens", ro.episode_token_limit, train_prompts + eval_prompts, "prompt")]
    else:
        checks = [("rollout.max_new_tokens", ro.max_new_tokens,
                   train_prompts + (eval_prompts if eval_tokens is None else []), "prompt")]
        if eval_tokens is not None:
            checks.append(("eval.max_new_tokens", eval_tokens, eval_prompts, "held-out prompt"))
    for key, new_tokens, prompts, what in checks:
        longest = max((len(p.ids) for p in prompts), default=None)
        if longest is not None and longest + new_tokens > limit:
            raise ConfigError(
                f"{key} = {new_tokens} plus the longest {what} ({longest} tokens, data.max_prompt_tokens = "
                f"{config.data.max_prompt_tokens}) is {longest + new_tokens} tokens, more than the {limit} "
                f"positions of model.name_or_path = {model_path!r}; lower {key} or data.max_prompt_tokens "
                "so that they fit")
