"""A prompt's images, held by where they come from rather than by their pixels.

A dataset of image prompts is checked whole at start-up (every image read, decoded and run through
the processor once: a bad one is an error or a counted skip then, never mid-run), but its pixels
are not kept: at 448 x 448 a Qwen-VL image is 4.6 MiB of ``pixel_values``, so a 1,000-prompt
dataset would hold 4.6 GB for the whole run. :class:`LazyImageInputs` and :class:`LazyImages`
stand in a :class:`~steadyrl.data.prompts.PromptItem`'s ``image_inputs`` and ``images``: they
read the row's images again (same checks) and process them when a step draws the prompt, and
the last :data:`RECENT` loaded prompts are kept so the engine, the metrics and the trainer of one
step do not repeat the work. What a lazy value says without loading: how many images, and the
names of the processor's image tensors.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

__all__ = ["RECENT", "ImageSource", "LazyImageInputs", "LazyImages", "loaded_count"]

RECENT = 64
"""Prompts whose loaded images and tensors are kept (least recently used dropped first)."""

_recent: OrderedDict = OrderedDict()  # id(source) -> (source, (images, inputs))
_loads = [0]  # how many times a source was read and processed (tests count work, not time)


def loaded_count() -> int:
    """How many times a prompt's images were read and processed since start (for tests)."""
    return _loads[0]


class ImageSource:
    """Where one prompt's images come from: the row, how its images load (``ImageOptions``), the
    text the processor renders them into, and the processor. :meth:`load` -> ``(images, inputs)``."""

    __slots__ = ("record", "options", "where", "text", "processor", "count", "keys", "__weakref__")

    def __init__(self, record: dict, options, where: str, text: str, processor, count: int, keys: tuple):
        self.record, self.options, self.where, self.text = record, options, where, text
        self.processor, self.count, self.keys = processor, count, keys

    def load(self) -> tuple[tuple, dict]:
        key = id(self)
        if key in _recent:
            _recent.move_to_end(key)
            return _recent[key][1]
        from .images import prompt_with_images
        from ..vlm_inputs import TOKEN_ALIGNED_KEYS

        _, images = prompt_with_images(self.record, self.options, self.where)
        out = self.processor(text=[self.text], images=[list(images)], return_tensors="pt", add_special_tokens=False)
        loaded = (tuple(images), {k: v for k, v in out.items() if k not in TOKEN_ALIGNED_KEYS})
        _loads[0] += 1
        _recent[key] = (self, loaded)
        while len(_recent) > RECENT:
            _recent.popitem(last=False)
        return loaded


class LazyImageInputs(Mapping):
    """A prompt's image tensors (``pixel_values``, ``image_grid_thw``, ...), processed on first use."""

    __slots__ = ("source",)

    def __init__(self, source: ImageSource):
        self.source = source

    def __getitem__(self, key):
        return self.source.load()[1][key]

    def __iter__(self):
        return iter(self.source.keys)

    def __len__(self) -> int:
        return len(self.source.keys)

    def __repr__(self) -> str:
        return f"LazyImageInputs({self.source.where}: {list(self.source.keys)})"


class LazyImages(Sequence):
    """A prompt's images as RGB ``PIL.Image`` s, read on first use."""

    __slots__ = ("source",)

    def __init__(self, source: ImageSource):
        self.source = source

    def __getitem__(self, index):
        return self.source.load()[0][index]

    def __len__(self) -> int:
        return self.source.count

    def __repr__(self) -> str:
        return f"LazyImages({self.source.where}: {self.source.count} image(s))"
