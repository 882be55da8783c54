"""A run's prompts: rendered (chat template, tools' schemas) and tokenized, checked against the model.

* :func:`prompt_options` — how prompts are rendered (a multi-turn episode is a conversation);
* :func:`tokenize_prompts` — the model's :class:`Prompts`: its tokenizer, the run's agent (built
  first: its tools go into the template) and the training and held-out prompts of the checked
  records, by source with ``data.train_sources`` / ``eval_sources``; returned, nothing filled in;
* :func:`check_context_length` — the longest prompt plus its response budget fits the model;
* :func:`named_template_errors` — a chat template's failure names the config key behind it;
* :func:`build_processor` / :func:`image_options` — a vision-language model's processor, and how
  the rows' images load (docs/vision-data.md); images for a text model are refused here.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace

from .agent import build_agent
from ..config.schema import Config
from ..data.prompts import PromptFormat, PromptItem, prepare_prompts
from ..data.images import ImageOptions, image_column_of, looks_like_image
from ..errors import ConfigError, ModelLoadError
from ..models import is_vision_model, load_tokenizer
from .sources import data_folder, tokenize_parts


def build_tokenizer(config: Config, model_path: str):
    m = config.model
    return load_tokenizer(m.tokenizer or model_path, revision=m.revision, trust_remote_code=m.trust_remote_code,
                          field="model.tokenizer" if m.tokenizer else "model.name_or_path")


def prompt_options(config: Config, agent) -> PromptFormat:
    """How prompts are rendered: a multi-turn episode is a conversation, so its string prompts are
    user messages of the chat template (``data.chat_template`` null means true there), and the
    tools' schemas go to the template."""
    chat_template = config.data.chat_template
    if config.rollout.multi_turn.enabled:
        if chat_template is False:
            raise ConfigError("data.chat_template = false, but rollout.multi_turn.tools / "
                              "rollout.multi_turn.environment make every "
                              "episode a conversation, which only the chat template can render; set "
                              "data.chat_template to true or null")
        chat_template = True
    return PromptFormat(config.data.max_prompt_tokens, chat_template, agent.tool_schemas if agent is not None else None,
                        config.data.chat_template_kwargs)


def build_processor(config: Config, model_path: str, *, train: bool = True):
    """The processor of a vision-language model at ``model_path`` (:func:`steadyrl.vlm.load_processor`),
    None for a text model. One that cannot load is a :class:`ModelLoadError` naming the field; for
    training (``train``) a critic (GAE) on a VLM is refused (its value head reads text-only hidden states)."""
    from ..vlm import load_processor

    m = config.model
    if not is_vision_model(model_path, revision=m.revision, trust_remote_code=m.trust_remote_code):
        return None
    if train and config.algorithm.advantage_estimator == "gae":
        raise ConfigError(f"model.name_or_path = {model_path!r} is a vision-language model: "
                          "algorithm.advantage_estimator = 'gae' needs a critic, which is not supported on one "
                          "(its value head reads text-only hidden states); use a critic-free estimator such as "
                          "grpo or rloo")
    try:
        return load_processor(m.tokenizer or model_path, revision=m.revision, trust_remote_code=m.trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - any loading failure, said once with the field
        field = "model.tokenizer" if m.tokenizer else "model.name_or_path"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelLoadError(f"{field} = {m.tokenizer or model_path!r} is a vision-language model, but its "
                             f"processor (image processor and tokenizer) could not be loaded: {first}") from None


def _has_image_part(prompt) -> bool:
    return isinstance(prompt, list) and any(
        isinstance(m, dict) and isinstance(m.get("content"), list)
        and any(isinstance(p, dict) and p.get("type") in ("image", "image_url") for p in m["content"])
        for m in prompt)


def image_options(config: Config, records: list[dict], processor, model_path: str,
                  folder: str | None, *, strict: bool = True, source: str = "data.train_path") -> ImageOptions | None:
    """How the images of ``records`` load (None: a text model with no image in its data, whose
    prompts go through the text path unchanged). Rows with images for a text model are a
    :class:`ConfigError` naming ``model.name_or_path`` and ``data.image_column``; with ``strict``
    (the training data), a ``data.image_column`` no row has is a :class:`DataError`."""
    d = config.data
    column = image_column_of(records, d.image_column, strict=strict)
    if processor is None:  # a column found by its name alone may hold text: only image-like values count
        def pictured_row(r):
            value = r.get(column) if column else None
            held = value not in (None, [], ()) if d.image_column else looks_like_image(value)
            return held or _has_image_part(r["prompt"])

        pictured = next((i for i, r in enumerate(records) if pictured_row(r)), None)
        if pictured is not None:
            raise ConfigError(f"{source} row {pictured + 1} has images (data.image_column = {column!r}), but "
                              f"model.name_or_path = {model_path!r} is a text-only model (its config has no "
                              "vision_config); train a vision-language model, or drop the images "
                              "(docs/vision-data.md)")
        return None
    return ImageOptions(column=column, folder=folder, max_pixels=d.max_image_pixels,
                        max_per_prompt=d.max_images_per_prompt, bad=d.bad_images)


def report_skipped(options: list[ImageOptions | None]) -> None:
    """Once, at start-up: the rows ``data.bad_images: skip`` left out, and the first reason."""
    from .. import distributed as dist

    skipped = [m for o in options if o is not None for m in o.skipped]
    if skipped and dist.is_main():
        print(f"data: skipped {len(skipped)} row(s) with a bad image (data.bad_images = skip); the first: "
              f"{skipped[0]}", flush=True)


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
    processor: object | None = None  # a vision-language model's processor (steadyrl.vlm); None for a text model
    skipped_images: int = 0  # rows left out for a bad image (data.bad_images = skip)


def tokenize_prompts(config: Config, model_path: str, inputs) -> Prompts:
    """The :class:`Prompts` of the model at ``model_path`` for the checked records of ``inputs``
    (:class:`~.setup.Inputs`, only read). The agent is built first; a failure after it shuts it down."""
    tokenizer = build_tokenizer(config, model_path)
    processor = build_processor(config, model_path)  # a VLM's (None for a text model): the agent renders with it
    with named_template_errors(config):
        agent = build_agent(config, tokenizer, processor)
        try:
            return _render_prompts(config, model_path, tokenizer, agent, inputs, processor)
        except BaseException:
            if agent is not None:
                agent.shutdown()
            raise


def _render_prompts(config: Config, model_path: str, tokenizer, agent, inputs, processor) -> Prompts:
    options = prompt_options(config, agent)
    d = config.data
    train_images = image_options(config, inputs.train_records, processor, model_path, data_folder(d.train_path))
    eval_images = image_options(config, inputs.eval_records, processor, model_path, data_folder(d.eval_path),
                                strict=False, source="data.eval_path")
    train_parts, eval_sets = None, None
    if inputs.train_parts is None:
        train, dropped = prepare_prompts(inputs.train_records, tokenizer, with_images(options, processor, train_images),
                                         source="data.train_path")
    else:  # each source on its own: the mixture samples from each source's prompts
        train_parts, dropped = tokenize_parts(inputs.train_parts, "data.train_sources", tokenizer,
                                              with_images(options, processor, train_images))
        train = [item for part in train_parts for item in part.records]
    if inputs.eval_parts is None:
        evals, _ = prepare_prompts(inputs.eval_records, tokenizer, with_images(options, processor, eval_images),
                                   source="data.eval_path")
    else:
        parts, _ = tokenize_parts(inputs.eval_parts, "data.eval_sources", tokenizer,
                                  with_images(options, processor, eval_images))
        eval_sets = {p.name: p.records for p in parts}
        evals = [item for p in parts for item in p.records]
    report_skipped([train_images, eval_images])
    skipped = len(train_images.skipped) if train_images is not None else 0
    return Prompts(model_path=model_path, tokenizer=tokenizer, agent=agent, train_prompts=train, eval_prompts=evals,
                   dropped=dropped, train_parts=train_parts, eval_sets=eval_sets, processor=processor,
                   skipped_images=skipped)


def with_images(options: PromptFormat, processor, images: ImageOptions | None) -> PromptFormat:
    """``options`` for :func:`prepare_prompts`, with the processor and image options when there are
    any (a text model's prompts: exactly the options they always had)."""
    if processor is None and images is None:
        return options
    return replace(options, processor=processor, images=images)


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
    if ro.multi_turn.enabled:  # every episode, held-out ones too, may use its whole token budget
        checks = [("rollout.multi_turn.max_episode_tokens", ro.episode_token_limit, train_prompts + eval_prompts,
                   "prompt")]
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
