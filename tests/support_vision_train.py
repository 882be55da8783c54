"""Tiny VLMs (both families of steadyrl.demo.vision_model) and image prompts for the rollout and
trainer tests of images (tests/vision/test_vision_rollout.py, test_vision_train.py)."""

from __future__ import annotations

from functools import lru_cache

import torch
from PIL import Image

from steadyrl.demo.vision_model import build_tiny_llava, build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.vlm_inputs import TOKEN_ALIGNED_KEYS

FAMILIES = ("qwen2_vl", "llava")
IMAGE_TOKENS = {"qwen2_vl": 1, "llava": 4}  # one 28 x 28 image: 2 x 2 patches (CLS dropped), 4 merged to 1
ALPHABET = "abcdefghij "


@lru_cache(maxsize=None)
def _built(family: str):
    tok = build_vision_tokenizer(ALPHABET, family)
    build = build_tiny_qwen2_vl if family == "qwen2_vl" else build_tiny_llava
    model, processor = build(tok)
    return tok, model, processor


def tiny_vlm(family: str):
    """``(tokenizer, model, processor)``: a fresh float32 copy of the family's tiny VLM each call."""
    import copy

    tok, model, processor = _built(family)
    return tok, copy.deepcopy(model), processor


def square(color: tuple[int, int, int], pattern: bool = False) -> Image.Image:
    """A 28 x 28 image of ``color`` (``pattern``: with a contrasting quarter, so two images differ more)."""
    img = Image.new("RGB", (28, 28), color)
    if pattern:
        img.paste((255 - color[0], 255 - color[1], 255 - color[2]), (0, 0, 14, 14))
    return img


def image_prompt(processor, images: list[Image.Image], text: str) -> tuple[list[int], dict]:
    """``(ids, image inputs)`` of one user message with ``images`` then ``text``: the processor's
    expanded ids, and its outputs without the token-aligned keys."""
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
    rendered = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                             tokenize=False)
    out = processor(text=[rendered], images=[images], return_tensors="pt")
    return out["input_ids"][0].tolist(), {k: v for k, v in out.items() if k not in TOKEN_ALIGNED_KEYS}


def text_prompt(tok, text: str) -> list[int]:
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                       tokenize=False)
    return tok(rendered)["input_ids"]


def plain_logprobs(model, batch, row: int) -> torch.Tensor:
    """``[R]`` the response log-probs of ``batch``'s row ``row`` from a plain full forward of the
    model over that row alone, with the processor's inputs (what transformers' own usage does):
    position ids only for a model that does not compute its own (LLaVA)."""
    from steadyrl.vlm_inputs import token_aligned_inputs

    ids = batch.input_ids[row : row + 1]
    kwargs = {"attention_mask": batch.attention_mask[row : row + 1]}
    inputs = batch.image_inputs[row] if batch.image_inputs is not None else None
    if inputs is not None:
        kwargs.update(inputs, **token_aligned_inputs(model.config, ids))
    if model.config.model_type != "qwen2_vl":
        kwargs["position_ids"] = batch.position_ids[row : row + 1]
    logits = model(input_ids=ids, **kwargs).logits[0, batch.prompt_len - 1 : -1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, batch.response_ids[row].unsqueeze(-1)).squeeze(-1)
    return logp * batch.response_mask[row]
