"""A character-level tokenizer built locally with the ``tokenizers`` library (no download).

Every character of ``alphabet`` is one token. The vocabulary starts with four special tokens::

    0 <pad>   1 <bos>   2 <eos>   3 <unk>   4.. the alphabet, in the order given

Encoding puts ``<bos>`` in front (``add_special_tokens=False`` leaves it out); decoding fuses the
characters back into one string with no spaces, so ``decode(ids, skip_special_tokens=True)`` is
the plain text. Padding is on the left, as generation wants. The result is a
``PreTrainedTokenizerFast`` that round-trips through ``save_pretrained`` /
``AutoTokenizer.from_pretrained`` of a local directory.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

__all__ = ["PAD", "BOS", "EOS", "UNK", "SPECIAL_TOKENS", "build_char_tokenizer"]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)


def _check_alphabet(alphabet: str) -> None:
    if not alphabet:
        raise ValueError("alphabet must hold at least one character, got ''")
    repeated = sorted({c for c in alphabet if alphabet.count(c) > 1})
    if repeated:
        raise ValueError(f"alphabet must not repeat characters, got {alphabet!r} (repeated: {repeated})")


def build_char_tokenizer(alphabet: str, *, model_max_length: int = 128) -> PreTrainedTokenizerFast:
    """A tokenizer with one token per character of ``alphabet`` plus ``<pad> <bos> <eos> <unk>``.

    Characters outside the alphabet encode to ``<unk>``.
    """
    _check_alphabet(alphabet)
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({ch: len(SPECIAL_TOKENS) + i for i, ch in enumerate(alphabet)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Every single character is its own pre-token ("[\\s\\S]" matches newlines too, unlike ".").
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A $B",
        special_tokens=[(BOS, vocab[BOS])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
