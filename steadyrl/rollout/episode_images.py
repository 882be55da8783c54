"""Images in a multi-turn episode of a vision-language policy (``processor`` given).

An episode's images are the prompt's (``PromptItem.images`` / ``image_inputs``, already expanded in
its ids) then those of its observations, in order of appearance. An observation whose messages hold
image parts (:mod:`steadyrl.agents.images`) is rendered like any other (the text after the sampled
turn's end token in the chat template's rendering, :func:`~steadyrl.agents.templating.rendered_suffix`),
its images as the template's placeholders, and that text is tokenized by the *processor* with the
images, so each placeholder becomes the image's tokens: observation tokens (``policy_mask`` 0, never
trained), counted against ``rollout.multi_turn.max_observation_tokens``. The processor's other outputs (pixel
values, grids; not the token-aligned ones) join the episode's image inputs, which every later turn's
``engine.generate(..., image_inputs=, images=)`` receives and ``Generation.image_inputs`` carries
to the trainer, one dict per row (each key concatenated along dim 0 in order).

Without a processor (a text model) an observation with an image is an error naming the tool or
environment that sent it: images are never dropped silently. ``rollout.multi_turn.mode: stepwise``
is refused for a vision-language policy (:func:`check_mode`): its per-turn samples carry no image
inputs.
"""

from __future__ import annotations

from ..agents.images import MAX_IMAGES_PER_EPISODE, ImageContentError, has_images, split_images
from ..errors import ConfigError
from ..vlm_inputs import TOKEN_ALIGNED_KEYS

__all__ = ["TOKEN_ALIGNED_KEYS", "check_mode", "template_of", "observation_images", "image_observation_ids",
           "generate_images", "row_image_inputs", "processed"]

def check_mode(mode: str, processor) -> None:
    """A vision-language policy's episodes are one sequence each: ``stepwise`` is refused."""
    if processor is not None and mode == "stepwise":
        raise ConfigError(
            "rollout.multi_turn.mode = 'stepwise' is not supported for a vision-language policy: its per-turn "
            "samples are re-rendered contexts that carry no image inputs; use 'single' (an append-only template) "
            "or 'as_sampled'")


class ProcessorTemplate:
    """The tokenizer, with the processor's chat template (a VLM may keep its template, the one that
    places images, on the processor only: LLaVA's)."""

    def __init__(self, tokenizer, processor):
        self.tokenizer, self.processor = tokenizer, processor
        self.chat_template = processor.chat_template

    def apply_chat_template(self, messages, **kwargs):
        return self.processor.apply_chat_template(messages, **kwargs)

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)

    def __getattr__(self, name):  # decode, pad_token_id, name_or_path ...: the tokenizer's
        return getattr(self.tokenizer, name)


def template_of(tokenizer, processor):
    """What the episode renders with: the tokenizer, or, for a processor whose chat template is not
    the tokenizer's, the tokenizer with the processor's template (:class:`ProcessorTemplate`)."""
    if processor is None or not processor.chat_template or processor.chat_template == tokenizer.chat_template:
        return tokenizer
    return ProcessorTemplate(tokenizer, processor)


def _source(message: dict, agent) -> str:
    from ..agents.environment import EnvironmentAgent

    if message.get("role") == "tool" and message.get("name"):
        return f"tool {message['name']!r}"
    if isinstance(agent, EnvironmentAgent):
        return f"environment {agent.cls.__name__!r}"
    return f"agent {type(agent).__name__!r}"


def observation_images(messages: list[dict], agent, processor, held: int) -> tuple[list[dict], list]:
    """``(messages, images)`` of an observation (:func:`~steadyrl.agents.images.split_images`);
    ``held``: the images the episode already holds. A text policy (``processor`` None) and an image
    raise ``ConfigError`` naming the sender; an unreadable image, or one past
    :data:`~steadyrl.agents.images.MAX_IMAGES_PER_EPISODE`, an ``ImageContentError``."""
    if not has_images(messages):
        return messages, []
    if processor is None:
        sender = next(_source(m, agent) for m in messages if has_images([m]))
        raise ConfigError(
            f"the {sender} returned an image in its observation, but the policy is a text model (it has no "
            "image processor); use a vision-language model (model.name_or_path) or return text")
    out, images = split_images(messages, "observation messages", limit=MAX_IMAGES_PER_EPISODE - held)
    return out, images


def processed(processor, text: str, images: list) -> tuple[list[int], dict | None]:
    """``text`` tokenized by the processor with ``images`` (each placeholder expanded): its ids and
    the image inputs (the processor's outputs less the token-aligned ones; None with no image)."""
    out = processor(text=[text], images=[list(images)] if images else None, return_tensors="pt",
                    add_special_tokens=False)
    inputs = {k: v for k, v in out.items() if k not in TOKEN_ALIGNED_KEYS}
    return out["input_ids"][0].tolist(), (inputs if images else None)


def image_observation_ids(processor, text: str, images: list) -> tuple[list[int], dict | None]:
    """An observation's ids and image inputs: ``text``, the template's rendering of messages whose
    ``{"type": "image"}`` parts stand for ``images`` (as :func:`~steadyrl.agents.chat.observation_ids`
    or :func:`~steadyrl.agents.chat.observation_tail_ids` render them), tokenized by the processor
    with the images."""
    try:
        return processed(processor, text, images)
    except (ValueError, RuntimeError, TypeError) as err:  # placeholders and images that do not match ...
        raise ImageContentError(f"the processor could not tokenize an observation with {len(images)} image(s): "
                                f"{type(err).__name__}: {err}") from None


def _joined(chunks: list[dict]) -> dict | None:
    from ..vlm_inputs import collate_image_inputs

    return collate_image_inputs(chunks)


def row_image_inputs(chunks_per_row: list[list[dict]]) -> list[dict | None] | None:
    """Each row's image inputs (its chunks joined in order), or None when no row has any."""
    if not any(chunks_per_row):
        return None
    return [_joined(chunks) if chunks else None for chunks in chunks_per_row]


def generate_images(chunks_per_row: list[list[dict]], images_per_row: list[list]) -> dict:
    """The image keyword arguments of ``engine.generate`` for these rows (``{}`` when none has an image)."""
    inputs = row_image_inputs(chunks_per_row)
    if inputs is None:
        return {}
    return {"image_inputs": inputs, "images": [tuple(images) for images in images_per_row]}
