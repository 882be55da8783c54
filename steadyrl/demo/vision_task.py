"""The image demo task: read a codeword off coloured squares (a CPU version of prime-rl's
"color-codeword" task).

A prompt is one user message holding one to three images, each a solid-colour square, and a short
question; each colour stands for one letter of a fixed secret table (:data:`CODE`), and the answer
is the letters of the squares in order::

    {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "image"},
                                             {"type": "text", "text": "code?"}]}],
     "images": [<red square>, <blue square>], "answer": "KB"}

Every square is drawn in code with PIL at ``IMAGE_SIZE`` x ``IMAGE_SIZE`` pixels (one image token
of the tiny Qwen2-VL of :mod:`.vision_model`), its colour jittered by up to :data:`JITTER` per
channel so no two images are alike. The colour sequences are split between training and held-out
records: a held-out record's sequence of two or three colours is never a training one (a one-colour
sequence is in both, with other shades), so held-out accuracy measures the table learned, not
sequences remembered. Both splits depend only on ``seed``.

The table is what RL must find: the warm start (:mod:`.vision_warmstart`) teaches the format (one
letter of :data:`LETTERS` per square, then the end of the turn) with a decoy table and random
letters, so the warm-started model reads every square and is never right. :func:`codeword_reward`
scores exact matches (1.0 or 0.0, the demo's reward); :func:`codeword_partial_reward` the fraction
of the squares' letters right.
"""

from __future__ import annotations

import itertools
import random

__all__ = [
    "CODE",
    "LETTERS",
    "QUESTION",
    "IMAGE_SIZE",
    "JITTER",
    "VISION_ALPHABET",
    "square",
    "codeword_prompt",
    "make_vision_splits",
    "codeword_reward",
    "codeword_partial_reward",
    "letters_right",
]

CODE: dict[tuple[int, int, int], str] = {
    (220, 40, 40): "K",    # red
    (40, 180, 60): "B",    # green
    (40, 70, 220): "X",    # blue
    (230, 210, 40): "R",   # yellow
    (200, 60, 200): "M",   # magenta
    (40, 200, 210): "T",   # cyan
}
"""The secret table: a square of this colour (RGB) stands for this letter."""

LETTERS = "".join(CODE.values())
"""The letters a codeword is made of."""

QUESTION = "code?"
"""The text after the squares."""

IMAGE_SIZE = 28
"""Side of a square in pixels: 2 x 2 patches of 14, one image token of the tiny Qwen2-VL."""

JITTER = 12
"""Largest change of a square's colour channel from its table colour, so every image differs."""

VISION_ALPHABET = "".join(sorted(set(LETTERS + QUESTION + "userasistn\n")))
"""Every character the prompts, roles and answers use: the alphabet of the demo's tokenizer."""

_HELD_OUT_SHARE = 0.25  # of the two- and three-colour sequences, held out


def square(rgb: tuple[int, int, int], size: int = IMAGE_SIZE):
    """A solid ``size`` x ``size`` RGB PIL image of colour ``rgb``."""
    from PIL import Image

    return Image.new("RGB", (size, size), tuple(int(c) for c in rgb))


def codeword_prompt(n_images: int) -> list[dict]:
    """The chat prompt of ``n_images`` squares: one user message, the images then :data:`QUESTION`."""
    return [{"role": "user", "content": [*({"type": "image"} for _ in range(n_images)),
                                         {"type": "text", "text": QUESTION}]}]


def _record(colours: tuple[int, ...], rng: random.Random) -> dict:
    table = list(CODE)
    images = [square(tuple(min(255, max(0, c + rng.randint(-JITTER, JITTER))) for c in table[k]))
              for k in colours]
    return {"prompt": codeword_prompt(len(colours)), "images": images,
            "answer": "".join(CODE[table[k]] for k in colours)}


def _sequences(max_images: int, seed: int) -> tuple[list, list]:
    """The colour sequences (as indices into :data:`CODE`) of each split."""
    singles = [(k,) for k in range(len(CODE))]
    longer = [s for n in range(2, max_images + 1) for s in itertools.product(range(len(CODE)), repeat=n)]
    random.Random(seed).shuffle(longer)
    cut = round(len(longer) * _HELD_OUT_SHARE)
    return singles + longer[cut:], singles + longer[:cut]


def make_vision_splits(n_train: int, n_eval: int, *, max_images: int = 3,
                       seed: int = 0) -> tuple[list[dict], list[dict]]:
    """``(train, held_out)`` records ``{"prompt", "images", "answer"}`` (see the module docstring).

    Each record draws its number of squares uniformly from ``1..max_images`` and then a sequence of
    that length of its split. Deterministic for a given ``seed`` and arguments.
    """
    if not 1 <= max_images <= 3:
        raise ValueError(f"max_images must be 1, 2 or 3, got {max_images}")
    if n_train < 0 or n_eval < 0:
        raise ValueError(f"n_train and n_eval must be >= 0, got {n_train} and {n_eval}")
    rng = random.Random(seed)
    splits = []
    for sequences, count in zip(_sequences(max_images, seed), (n_train, n_eval)):
        by_length = {n: [s for s in sequences if len(s) == n] for n in range(1, max_images + 1)}
        by_length = {n: s for n, s in by_length.items() if s}
        splits.append([_record(rng.choice(by_length[rng.choice(sorted(by_length))]), rng) for _ in range(count)])
    return splits[0], splits[1]


def _answer(completion: str) -> str:
    return completion.strip()


def letters_right(completion: str, answer: str) -> float:
    """The fraction of ``answer``'s letters that ``completion`` (stripped) has at their places,
    0.0 when its length differs."""
    got = _answer(completion)
    if len(got) != len(answer) or not answer:
        return 0.0
    return sum(a == b for a, b in zip(got, answer)) / len(answer)


def codeword_reward(prompts: list, completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 where the completion (whitespace stripped) is the codeword, else 0.0."""
    if not len(prompts) == len(completions) == len(answer):
        raise ValueError(f"prompts, completions and answer must have one length, got "
                         f"{len(prompts)}, {len(completions)}, {len(answer)}")
    return [1.0 if _answer(c) == str(a) else 0.0 for c, a in zip(completions, answer)]


def codeword_partial_reward(prompts: list, completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """:func:`letters_right` of each completion: partial credit per letter."""
    if not len(prompts) == len(completions) == len(answer):
        raise ValueError(f"prompts, completions and answer must have one length, got "
                         f"{len(prompts)}, {len(completions)}, {len(answer)}")
    return [letters_right(c, str(a)) for c, a in zip(completions, answer)]
