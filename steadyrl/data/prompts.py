"""Prompts ready for generation.

A :class:`PromptItem` is one dataset record after rendering (chat template when it applies) and
tokenizing once: ``text`` is what reward functions receive as the prompt, ``ids`` what the
engine generates from, ``columns`` the record's other columns (``answer`` and the rest), passed
to reward functions as keyword lists, ``messages`` the record's prompt when it was a list of chat
messages (what TRL-style reward functions receive instead of ``text``), and ``conversation`` the
prompt as the chat messages the template rendered (a multi-turn episode continues it).

For a vision-language model (``processor`` given, docs/vision-data.md) a row's images are loaded
and checked (:mod:`steadyrl.data.images`), the prompt is rendered by the processor's chat template
and tokenized by the processor: ``ids`` then hold each image's expanded tokens (which count
against ``max_prompt_tokens``), ``images`` the images and ``image_inputs`` the processor's
tensors for them minus the token-aligned ones (``pixel_values``, ``image_grid_thw``, ...). Every
image is checked here, once, but neither is kept: both are lazy (:mod:`steadyrl.data.lazy_images`),
read again and processed when a step draws the prompt, so memory does not grow with the dataset. A row
with no image is rendered and tokenized exactly as for a text model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import DataError
from .chat import prompt_messages, render_prompt
from .images import ImageOptions, prompt_with_images


@dataclass(frozen=True)
class PromptItem:
    text: str
    ids: list[int]
    columns: dict = field(default_factory=dict)
    messages: list | None = None  # the record's prompt, when it is a list of chat messages
    conversation: list | None = None  # the chat messages the template rendered (multi-turn history)
    # the PIL images, in the order of the prompt's image placeholders (from a dataset: LazyImages)
    images: tuple = ()
    # the processor's image tensors (no token-aligned key), None: no image (from a dataset: LazyImageInputs,
    # processed when a step draws the prompt: steadyrl.data.lazy_images)
    image_inputs: dict | None = None


@dataclass(frozen=True)
class PromptFormat:
    """How a run's records become prompts, built once (:func:`steadyrl.assembly.prompts.prompt_options`):
    at most ``max_prompt_tokens`` tokens; rendered with the chat template or not (``chat_template``:
    True, False, or None: when the prompt is a message list and the tokenizer has one), with the
    ``tools``' schemas and ``template_kwargs`` passed to the template; a vision-language model's
    ``processor`` and ``images`` (how the rows' images load), None for a text model."""

    max_prompt_tokens: int
    chat_template: bool | None
    tools: list[dict] | None = None
    template_kwargs: dict | None = None
    processor: Any = None
    images: ImageOptions | None = None


def prepare_prompts(records: list[dict], tokenizer, form: PromptFormat, *,
                    source: str) -> tuple[list[PromptItem], int]:
    """Render and tokenize ``records`` as ``form`` says; drop those over ``form.max_prompt_tokens``.
    ``source`` names the records in errors (``data.train_path``).

    With a ``processor`` (a vision-language model's) and ``images`` (how the rows' images load),
    rows with images go through the processor (see the module docstring); a row whose image is
    bad is a :class:`DataError`, or, with ``images.bad == "skip"``, left out and its message
    appended to ``images.skipped``. Returns ``(items, dropped)`` (``dropped``: over the length
    limit). All prompts over the limit is a :class:`DataError`.
    """
    items, lengths = [], []
    images, max_prompt_tokens = form.images, form.max_prompt_tokens
    for index, record in enumerate(records):
        pictures, prompt, where = (), record["prompt"], f"{source} row {index + 1}"
        if images is not None:
            try:
                prompt, pictures = prompt_with_images(record, images, where)
            except DataError as err:
                if images.bad != "skip":
                    raise
                images.skipped.append(str(err))
                continue
        if pictures:
            item = _vision_item(record, prompt, pictures, form, source=source, where=where)
        else:
            item = _text_item(record, prompt, tokenizer, form)
        lengths.append(len(item.ids))
        if len(item.ids) <= max_prompt_tokens:
            items.append(item)
    if lengths and not items:
        raise DataError(
            f"all {len(lengths)} prompts of {source} are longer than data.max_prompt_tokens = "
            f"{max_prompt_tokens} tokens (the shortest has {min(lengths)}, the longest {max(lengths)}); "
            "raise the limit"
        )
    return items, len(lengths) - len(items)


def _text_item(record: dict, prompt, tokenizer, form: PromptFormat) -> PromptItem:
    text = render_prompt(tokenizer, prompt, chat_template=form.chat_template, tools=form.tools,
                         template_kwargs=form.template_kwargs)
    templated = isinstance(prompt, list) or form.chat_template is True
    # verbose=False: the tokenizer's "longer than the model's maximum" warning is ours to say
    ids = tokenizer(text, add_special_tokens=not templated, verbose=False)["input_ids"]
    columns = {k: v for k, v in record.items() if k != "prompt"}
    return PromptItem(text=text, ids=list(ids), columns=columns,
                      messages=prompt if isinstance(prompt, list) else None,
                      conversation=prompt_messages(prompt) if templated else None)


def _vision_item(record: dict, messages: list, pictures: tuple, form: PromptFormat, *, source: str,
                 where: str) -> PromptItem:
    """A row with images: rendered by the processor's chat template, tokenized by the processor.
    The item keeps where its images come from (``form.images``, the row's name ``where`` in errors),
    not their pixels (:mod:`steadyrl.data.lazy_images`)."""
    from ..vlm_inputs import TOKEN_ALIGNED_KEYS  # not at import: loading prompts stays torch-free
    from .chat import ChatTemplateError

    processor, tools, template_kwargs = form.processor, form.tools, form.template_kwargs
    if processor is None:
        raise DataError(f"{source}: a row has images but the model has no image processor: it is a text-only "
                        "model (set model.name_or_path to a vision-language model, or remove the images)")
    if form.chat_template is False:
        raise DataError(f"{source}: data.chat_template = false, but a row has images, which only the "
                        "processor's chat template can place; set data.chat_template to true or null")
    try:
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                             **({"tools": tools} if tools else {}), **(template_kwargs or {}))
    except Exception as err:  # noqa: BLE001 - a template may raise anything
        raise ChatTemplateError(f"the processor's chat template failed on a prompt with images: "
                                f"{type(err).__name__}: {err}") from None
    out = processor(text=[text], images=[list(pictures)], return_tensors="pt", add_special_tokens=False)
    ids = out["input_ids"][0].tolist()
    image_inputs = {k: v for k, v in out.items() if k not in TOKEN_ALIGNED_KEYS}
    columns = {k: v for k, v in record.items() if k != "prompt"}
    from .lazy_images import ImageSource, LazyImageInputs, LazyImages

    held = ImageSource(record, form.images, where, text, processor, len(pictures), tuple(image_inputs))
    pictures, image_inputs = LazyImages(held), LazyImageInputs(held)
    return PromptItem(text=text, ids=ids, columns=columns, messages=messages, conversation=messages,
                      images=pictures, image_inputs=image_inputs)
