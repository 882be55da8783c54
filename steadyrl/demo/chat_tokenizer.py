"""A small chat tokenizer for the tool demo, trained locally with the ``tokenizers`` library.

A byte-pair-encoding model trained on the demo's own rendered transcripts, so the text that
every transcript repeats (the system message listing the tools, the tool-call JSON around the
expression, the ``<tool_response>`` wrapper) becomes a few tokens, while every digit stays a token
of its own (``pre_tokenizers.Digits(individual_digits=True)``): arithmetic is done on digits.
Printable ASCII is always in the alphabet; any other character encodes to ``<unk>``.

The chat format is Hermes / Qwen2.5's, so the real ``hermes`` tool-call parser reads the turns::

    <|im_start|>system\\n# Tools\\n<tools>\\n{schema json}\\n</tools><|im_end|>\\n   (only with tools)
    <|im_start|>user\\nWhat is 347*29?<|im_end|>\\n
    <|im_start|>assistant\\n<tool_call>\\n{"name": "calculate", "arguments": {...}}\\n</tool_call><|im_end|>\\n
    <|im_start|>user\\n<tool_response>\\n10063\\n</tool_response><|im_end|>\\n
    <|im_start|>assistant\\n10063<|im_end|>\\n

``<|im_end|>`` is the EOS token (every policy turn ends with it), ``<|endoftext|>`` the padding
and ``<|im_start|>`` the BOS token (none is added on encode: the template writes it). The tool
markers are added tokens that are not special (as in Qwen2.5), so they survive
``skip_special_tokens=True``. Padding is on the left, as generation wants.
"""

from __future__ import annotations

import string

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

__all__ = ["IM_START", "IM_END", "PAD", "UNK", "TOOL_MARKERS", "CHAT_TEMPLATE", "build_chat_tokenizer"]

IM_START, IM_END, PAD, UNK = "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<unk>"
TOOL_MARKERS: tuple[str, ...] = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

# Written with explicit "\n" strings: transformers renders templates with trim_blocks/lstrip_blocks.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{ '<|im_start|>system\\n# Tools\\n<tools>' }}"
    "{%- for tool in tools %}{{ '\\n' + ((tool.function if tool.function is defined else tool) | tojson) }}"
    "{%- endfor %}"
    "{{ '\\n</tools><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Hermes-style chat template: tool results are user turns wrapped in ``<tool_response>``."""


def build_chat_tokenizer(corpus: list[str], *, vocab_size: int = 400,
                         model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """A BPE tokenizer trained on ``corpus`` (rendered transcripts) with the chat template above.

    Deterministic for a given corpus. ``vocab_size`` bounds the vocabulary (special tokens,
    the alphabet and the merges learned).
    """
    if not corpus:
        raise ValueError("corpus must hold at least one text to train the tokenizer on")
    specials = [PAD, IM_START, IM_END, UNK]
    core = Tokenizer(models.BPE(unk_token=UNK))
    # added before training, so that the trainer spends no merges on them
    core.add_special_tokens(specials)
    core.add_tokens([AddedToken(m, special=False, normalized=False) for m in TOOL_MARKERS])
    core.pre_tokenizer = pre_tokenizers.Digits(individual_digits=True)
    core.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=list(string.printable), show_progress=False)
    core.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=IM_START,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
