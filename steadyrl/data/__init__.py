"""steadyrl.data: prompt data sets, chat templates, length filtering and batching.

* :func:`load_records`: JSONL / JSON / Parquet / CSV / ``save_to_disk`` folders to records
  ``{"prompt", "answer"?, <extra columns>}``;
* :func:`render_prompt`, :func:`encode_prompt`: a prompt as model input, chat template or not;
* :func:`filter_by_length`: drop prompts over ``max_prompt_tokens``;
* :class:`PromptSampler`: an endless, seeded, resumable stream of full batches;
* :class:`MixtureSampler`: several sources mixed by weight, as exactly resumable.
* :mod:`.images`: a row's images (paths, bytes, PIL, ``datasets`` features, data URLs) loaded
  and checked at start-up for vision-language models (docs/vision-data.md).

See ``docs/data.md``.
"""

from .chat import encode_prompt, filter_by_length, prompt_lengths, render_prompt, uses_chat_template
from .loading import DATA_FORMATS, EVAL_SPLITS, DataFormat, eval_split_of, is_chat, load_records
from .mixture import MixtureSampler
from .sampler import PromptSampler

__all__ = [
    "DATA_FORMATS",
    "DataFormat",
    "EVAL_SPLITS",
    "MixtureSampler",
    "PromptSampler",
    "encode_prompt",
    "eval_split_of",
    "filter_by_length",
    "is_chat",
    "load_records",
    "prompt_lengths",
    "render_prompt",
    "uses_chat_template",
]
