"""The demo task: reverse a short string of letters.

A prompt is the string followed by ``=``; the answer is the string reversed::

    {"prompt": "cabhe=", "answer": "ehbac"}

Each string draws a length uniformly from ``min_len..max_len`` and then its letters uniformly; a
string already drawn is redrawn (length too), so the shortest lengths, which have few distinct
strings (8**3 = 512 of length 3), are under-represented once they run out, mostly in the held-out
split, which is drawn last. The splits never share a string and depend only on ``seed``.
The reward is 1.0 when the completion (whitespace stripped) equals the answer, else 0.0.
:func:`exact_match_accuracy` measures a model on records with ``model.generate``.
"""

from __future__ import annotations

import random

import torch

from ..rollout.hf import neutral_generation_defaults

__all__ = [
    "LETTERS",
    "SEPARATOR",
    "VOCAB_CHARS",
    "format_prompt",
    "make_splits",
    "reverse_reward",
    "generate_completions",
    "exact_match_accuracy",
]

LETTERS = "abcdefgh"
"""The letters the strings are made of."""

SEPARATOR = "="
"""Ends the prompt: the model writes the reversed string after it."""

VOCAB_CHARS = LETTERS + SEPARATOR
"""Every character the task uses: the alphabet for :func:`~steadyrl.demo.tokenizer.build_char_tokenizer`."""


def format_prompt(text: str) -> str:
    """``"abc"`` -> ``"abc="``."""
    return text + SEPARATOR


def _space_size(n_letters: int, min_len: int, max_len: int) -> int:
    return sum(n_letters**k for k in range(min_len, max_len + 1))


def make_splits(
    n_train: int,
    n_eval: int,
    *,
    min_len: int = 3,
    max_len: int = 6,
    letters: str = LETTERS,
    seed: int = 0,
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """``(train, held_out)`` lists of ``{"prompt", "answer"}``; no string is in both.

    Deterministic for a given ``seed`` and arguments (see the module docstring for the lengths).
    """
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if n_train < 0 or n_eval < 0:
        raise ValueError(f"n_train and n_eval must be >= 0, got {n_train} and {n_eval}")
    if SEPARATOR in letters or len(set(letters)) != len(letters) or not letters:
        raise ValueError(f"letters must be distinct, non-empty and exclude {SEPARATOR!r}, got {letters!r}")
    wanted = n_train + n_eval
    if 2 * wanted > _space_size(len(letters), min_len, max_len):
        raise ValueError(
            f"n_train + n_eval = {wanted} is too many distinct strings of length {min_len}..{max_len} "
            f"over {len(letters)} letters; use fewer records or longer strings"
        )
    rng = random.Random(seed)
    seen: set[str] = set()
    strings: list[str] = []
    while len(strings) < wanted:
        length = rng.randint(min_len, max_len)
        text = "".join(rng.choice(letters) for _ in range(length))
        if text not in seen:
            seen.add(text)
            strings.append(text)
    records = [{"prompt": format_prompt(s), "answer": s[::-1]} for s in strings]
    return records[:n_train], records[n_train:]


def reverse_reward(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 where ``completion.strip() == answer``, else 0.0 (the steadyrl user-reward signature)."""
    if not len(prompts) == len(completions) == len(answer):
        raise ValueError(
            f"prompts, completions and answer must have one length, got "
            f"{len(prompts)}, {len(completions)}, {len(answer)}"
        )
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]


@torch.no_grad()
def generate_completions(
    model,
    tokenizer,
    prompts: list[str],
    max_new_tokens: int,
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``prompt_ids [B, P]`` and ``completion_ids [B, C]`` (``<pad>`` after ``<eos>``).

    Greedy, or with ``do_sample`` plain sampling at ``temperature``. The model is put in eval mode
    (no dropout); its training flag is restored afterwards.
    """
    was_training = model.training
    model.eval()
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    # Plain sampling from softmax(logits / temperature): no top-k / top-p truncation.
    sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if do_sample else dict(do_sample=False)
    with neutral_generation_defaults(model):  # the model's generation_config cannot add to these
        out = model.generate(
            **enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id, **sampling,
        )
    model.train(was_training)
    prompt_len = enc["input_ids"].shape[1]
    return enc["input_ids"], out[:, prompt_len:]


def exact_match_accuracy(
    model,
    tokenizer,
    records: list[dict[str, str]],
    max_new_tokens: int,
    *,
    do_sample: bool = False,
    batch_size: int = 256,
) -> float:
    """Fraction of ``records`` whose generated completion earns :func:`reverse_reward` 1.0."""
    if not records:
        raise ValueError("records must not be empty")
    correct = 0.0
    for start in range(0, len(records), batch_size):
        chunk = records[start : start + batch_size]
        prompts = [r["prompt"] for r in chunk]
        _, completion_ids = generate_completions(model, tokenizer, prompts, max_new_tokens, do_sample=do_sample)
        texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        correct += sum(reverse_reward(prompts, texts, [r["answer"] for r in chunk]))
    return correct / len(records)
