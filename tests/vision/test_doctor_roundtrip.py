"""The doctor's chat-template round trip with image placeholders: a vision-language prompt renders one
placeholder per image and the processor expands it into several image tokens; a sampled response
must still come back as its ids (the expanded runs are collapsed before the prompt is compared)."""

from dataclasses import dataclass

import pytest
import torch
from PIL import Image

from steadyrl.demo.vision_model import build_tiny_llava, build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.preflight.roundtrip import _reencode, collapse_image_runs, image_token_of, round_trip

ALPHABET = "abcdefghijklmnopqrstuvwxyz ?\n"
MESSAGES = [{"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "what?"}]}]


@dataclass
class _Gen:
    """The fields of a Generation that the round trip reads."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    image_inputs: list | None = None

    def __len__(self):
        return self.prompt_ids.shape[0]


def _family(name: str):
    tokenizer = build_vision_tokenizer(ALPHABET, name)
    if name == "qwen2_vl":  # 56 x 56: 4 x 4 patches merged 2 x 2, four image tokens per image
        return build_tiny_qwen2_vl(tokenizer, image_size=56)
    return build_tiny_llava(tokenizer)  # four image tokens per image (2 x 2 patches; CLS dropped)


def _sample(model, processor, response: str) -> _Gen:
    tok = processor.tokenizer
    text = processor.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    images = [Image.new("RGB", (56, 56), (200, 30, 30)), Image.new("RGB", (56, 56), (30, 30, 200))]
    prompt = processor(text=[text], images=[images], return_tensors="pt")["input_ids"]
    sampled = torch.tensor([tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])
    return _Gen(prompt, torch.ones_like(prompt), sampled, torch.ones_like(sampled))


@pytest.mark.parametrize("family,per_image", [("qwen2_vl", 4), ("llava", 4)])
def test_a_sampled_response_after_expanded_images_round_trips(family, per_image):
    model, processor = _family(family)
    image_token = image_token_of(model)
    assert image_token == model.config.image_token_id
    gen = _sample(model, processor, "a red and a blue")
    prompt = gen.prompt_ids[0].tolist()
    rendered = processor.tokenizer(processor.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False),
                                   add_special_tokens=False)["input_ids"]
    assert prompt.count(image_token) == 2 * per_image and rendered.count(image_token) == 2  # expanded vs placeholder
    eos = {processor.tokenizer.eos_token_id}
    trip = round_trip(model, processor.tokenizer, gen, [MESSAGES], eos)
    assert (trip.changed, trip.samples, trip.gap) == (0, 1, 0.0)


def test_without_collapsing_the_expanded_prompt_never_matches_its_rendering():
    """What the round trip did before: every image sample counted as changed."""
    model, processor = _family("qwen2_vl")
    gen = _sample(model, processor, "ab")
    prompt = gen.prompt_ids[0].tolist()
    response = processor.tokenizer("ab", add_special_tokens=False)["input_ids"]
    assert _reencode(processor.tokenizer, MESSAGES, prompt, "ab")[: len(response)] != response
    assert _reencode(processor.tokenizer, MESSAGES, prompt, "ab", model.config.image_token_id)[: len(response)] == response


def test_collapse_image_runs_keeps_one_token_per_run_and_leaves_text_alone():
    assert collapse_image_runs([1, 7, 7, 7, 2, 7, 3, 7, 7], 7) == [1, 7, 2, 7, 3, 7]
    assert collapse_image_runs([1, 7, 7], None) == [1, 7, 7]
    assert collapse_image_runs([], 7) == []


def test_a_text_model_has_no_image_token(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    assert image_token_of(AutoModelForCausalLM.from_pretrained(tiny_model_dir)) is None
