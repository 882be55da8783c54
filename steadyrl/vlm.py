"""Vision-language models: what tells one apart, and loading its processor.

A vision-language model (VLM) is any transformers model whose config has a ``vision_config``
(Qwen2-VL / Qwen2.5-VL, LLaVA, Gemma 3, SmolVLM, ...): it is loaded with
``AutoModelForImageTextToText`` and reads images through a *processor* (an image processor plus
the tokenizer), which also expands each image placeholder of the prompt into the image's tokens.

:func:`load_processor` loads that processor by hub name or local directory. transformers' Qwen-VL
processors declare a video processor, whose auto class needs ``torchvision``; without it (a CPU
install) the processor is rebuilt for images only from its saved image processor and tokenizer
(:func:`image_only_processor`), which tokenizes images exactly as the full one does.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["is_vision_config", "load_processor", "image_only_processor", "QWEN_VL_MODEL_TYPES"]

QWEN_VL_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")
"""Model types whose processor is the Qwen-VL one (multimodal RoPE, ``image_grid_thw``)."""


def is_vision_config(config) -> bool:
    """Whether a transformers model config describes a vision-language model."""
    return getattr(config, "vision_config", None) is not None


@lru_cache(maxsize=None)
def _image_only_qwen_class():
    from transformers import Qwen2VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
        """Qwen2-VL's processor without its video processor (which needs torchvision)."""

        @classmethod
        def get_attributes(cls):
            return ["image_processor", "tokenizer"]

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

        def to_dict(self):
            out = super().to_dict()
            out["processor_class"] = "Qwen2VLProcessor"  # what a full install loads it as
            return out

    return ImageOnlyQwen2VLProcessor


def image_only_processor(image_processor, tokenizer, chat_template: str | None = None):
    """A processor over ``image_processor`` and ``tokenizer`` for images only: Qwen-VL's without
    its video processor, else the processor class the image processor belongs with."""
    name = type(image_processor).__name__
    if name.startswith("Qwen2VLImageProcessor"):
        return _image_only_qwen_class()(image_processor=image_processor, tokenizer=tokenizer,
                                        chat_template=chat_template or getattr(tokenizer, "chat_template", None))
    raise ValueError(f"no image-only processor for {name}; install torchvision or load the full processor")


def load_processor(name: str, *, revision: str | None = None, trust_remote_code: bool = False,
                   local_files_only: bool = False):
    """The processor of the VLM at ``name`` (hub name or local directory): ``AutoProcessor``, or,
    where that needs torchvision or falls back to the bare tokenizer, :func:`image_only_processor`
    over the saved image processor and tokenizer. Raises whatever loading raises (the caller names
    the config field)."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    kwargs = {"revision": revision, "trust_remote_code": trust_remote_code, "local_files_only": local_files_only}
    try:
        processor = AutoProcessor.from_pretrained(name, **kwargs)
        if getattr(processor, "image_processor", None) is not None:
            return processor
    except (ImportError, OSError) as exc:  # the video processor: its auto class needs torchvision
        if not any(word in str(exc).lower() for word in ("torchvision", "video")):
            raise
    image_processor = AutoImageProcessor.from_pretrained(name, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
    return image_only_processor(image_processor, tokenizer)
