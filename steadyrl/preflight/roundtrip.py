"""The chat-template round trip: does the text of a sampled response, rendered back the way the
prompt was rendered (the chat template for a chat prompt, plain text otherwise) and encoded again,
give the ids that were sampled? Where it does not, any path that carries text instead of ids (a
multi-turn history rendered again, an OpenAI-style server, a trainer that re-tokenizes) trains on
other tokens than the engine sampled; the gap is measured as the trainer's log-likelihood of the
re-encoded response against that of the sampled one, per sampled token.

A vision-language prompt's images are expanded by the processor into runs of image tokens (one
per merged patch), while its chat template renders each image as one placeholder: a prompt's
ids are compared with the rendering's after each run of image tokens is collapsed to one
(:func:`collapse_image_runs`), so the response part is what is compared, as for text."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RoundTrip:
    changed: int
    """Samples whose response does not come back as the sampled ids."""
    samples: int
    gap: float
    """``sum |LL(re-encoded) - LL(sampled)| / sum n`` over every sample (0 where it round-trips)."""
    example: tuple[list[int], list[int]] | None = None
    """``(sampled, re-encoded)`` ids of the first sample that changed."""


def collapse_image_runs(ids: list[int], image_token_id: int | None) -> list[int]:
    """``ids`` with every run of consecutive ``image_token_id`` tokens replaced by one (unchanged
    when ``image_token_id`` is None): an expanded image as its template placeholder has it."""
    if image_token_id is None:
        return list(ids)
    return [t for i, t in enumerate(ids) if not (t == image_token_id and i and ids[i - 1] == image_token_id)]


def image_token_of(model) -> int | None:
    """The id a vision-language ``model`` expands images into (None for a text model)."""
    from ..vlm import is_vision_config
    from ..vlm_inputs import image_token_id

    return image_token_id(model.config) if is_vision_config(model.config) else None


def _reencode(tokenizer, messages: list[dict] | None, prompt_ids: list[int], text: str,
              image_token_id: int | None = None) -> list[int]:
    """The response ids that rendering the prompt and ``text`` back gives: through the chat template
    when the prompt was a chat (``messages``), else as plain text after the prompt's ids. The tokens
    after the prompt's ids (all of them when the rendering does not start with the prompt's ids),
    runs of ``image_token_id`` collapsed to one on both sides (:func:`collapse_image_runs`)."""
    prompt = collapse_image_runs(prompt_ids, image_token_id)
    if messages is not None:
        from ..agents.chat import render

        full = render(tokenizer, list(messages) + [{"role": "assistant", "content": text}], tools=None,
                      add_generation_prompt=False, purpose="a sampled response")
        ids = collapse_image_runs(tokenizer(full, add_special_tokens=False)["input_ids"], image_token_id)
    else:
        ids = prompt + list(tokenizer(text, add_special_tokens=False)["input_ids"])
    n = len(prompt)
    return ids[n:] if ids[:n] == prompt else ids


@torch.no_grad()
def _loglik(model, prompt: list[int], response: list[int], image_inputs: dict | None = None) -> float:
    """``sum_t log p(response_t | prompt, response_<t)`` under ``model`` (float32 softmax), a VLM's
    prompt with its ``image_inputs``."""
    from ..vlm_inputs import model_image_kwargs

    if not response:
        return 0.0
    ids = torch.tensor([prompt + response], device=next(model.parameters()).device)
    extra = model_image_kwargs(model.config, ids, image_inputs, None, next(model.parameters()).dtype)
    logits = model(input_ids=ids, use_cache=False, **extra).logits[0, len(prompt) - 1: -1].float().cpu()
    return float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(response).unsqueeze(-1)).sum())


def round_trip(trainer_model, tokenizer, gen, chats: list[list[dict] | None], eos_ids: set[int]) -> RoundTrip:
    """Check every sample of ``gen``; ``chats[row]``: the chat messages its prompt was rendered from
    (None: a plain-text prompt)."""
    changed, total, diff, example = 0, 0, 0.0, None
    image_token = image_token_of(trainer_model)
    for row in range(len(gen)):
        prompt = gen.prompt_ids[row][gen.prompt_mask[row].bool()].tolist()
        sampled = gen.response_ids[row][gen.response_mask[row].bool()].tolist()
        while sampled and sampled[-1] in eos_ids:  # the end token is the template's own, not the text's
            sampled = sampled[:-1]
        text = tokenizer.decode(sampled, skip_special_tokens=False)
        again = _reencode(tokenizer, chats[row], prompt, text, image_token)[: len(sampled)]
        total += len(sampled)
        if again != sampled:
            changed += 1
            example = example or (sampled, again)
            images = gen.image_inputs[row] if gen.image_inputs is not None else None
            diff += abs(_loglik(trainer_model, prompt, again, images) - _loglik(trainer_model, prompt, sampled, images))
    return RoundTrip(changed, len(gen), diff / total if total else 0.0, example)
