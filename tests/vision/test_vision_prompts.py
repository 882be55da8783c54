"""prepare_prompts with a vision-language model's processor: the ids hold each image's expanded
tokens, image_inputs the processor's image tensors; text rows stay exactly as for a text model."""

import io

import pytest
import torch
from PIL import Image

from steadyrl.data.images import ImageOptions
from steadyrl.data.prompts import PromptFormat, prepare_prompts
from steadyrl.vlm_inputs import TOKEN_ALIGNED_KEYS
from steadyrl.demo.vision_model import build_tiny_llava, build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.errors import DataError

ALPHABET = "abcdefghijklmnopqrstuvwxyz ?0123456789"
BUILDERS = {"qwen2_vl": build_tiny_qwen2_vl, "llava": build_tiny_llava}
IMAGE_TOKENS = {"qwen2_vl": 1, "llava": 4}  # a 28 x 28 image, after the processor's expansion


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def family(request):
    tok = build_vision_tokenizer(ALPHABET, request.param)
    model, processor = BUILDERS[request.param](tok)
    return request.param, tok, model, processor


def png(color=(200, 10, 10), size=(28, 28)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def prepare(records, tok, processor, **kw):
    options = kw.pop("images", None) or ImageOptions(column="images")
    form = PromptFormat(kw.pop("max_prompt_tokens", 200), chat_template=None, processor=processor, images=options,
                        **kw)
    return prepare_prompts(records, tok, form, source="data.train_path")


def image_token_id(model):
    return model.config.image_token_id


def test_ids_hold_the_expanded_image_tokens_and_image_inputs_the_tensors(family):
    name, tok, model, processor = family
    records = [{"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what colour"}]}],
                "images": [png()], "answer": "red"}]
    (item,), dropped = prepare(records, tok, processor)
    assert dropped == 0
    assert item.ids.count(image_token_id(model)) == IMAGE_TOKENS[name]
    assert len(item.images) == 1 and item.columns["answer"] == "red"
    assert not set(item.image_inputs) & set(TOKEN_ALIGNED_KEYS)
    shapes = {k: tuple(v.shape) for k, v in item.image_inputs.items()}
    expected = {"qwen2_vl": {"pixel_values": (4, 1176), "image_grid_thw": (1, 3)},
                "llava": {"pixel_values": (1, 3, 28, 28)}}[name]
    assert shapes == expected
    assert item.messages[0]["content"][0] == {"type": "image"}


def test_the_ids_run_through_the_model_with_the_image_inputs(family):
    name, tok, model, processor = family
    (item,), _ = prepare([{"prompt": "abc", "images": [png()]}], tok, processor)
    ids = torch.tensor([item.ids])
    extra = {}
    if name == "qwen2_vl":
        extra["mm_token_type_ids"] = (ids == model.config.image_token_id).long()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), **item.image_inputs, **extra)
    assert out.logits.shape[:2] == ids.shape and torch.isfinite(out.logits).all()


def test_two_images_in_one_prompt_expand_both(family):
    name, tok, model, processor = family
    records = [{"prompt": "compare", "images": [png(), png((0, 0, 255))]}]
    (item,), _ = prepare(records, tok, processor)
    assert item.ids.count(image_token_id(model)) == 2 * IMAGE_TOKENS[name]
    assert item.image_inputs["pixel_values"].shape[0] == {"qwen2_vl": 8, "llava": 2}[name]


def test_a_text_row_through_a_vlm_is_tokenized_as_for_a_text_model(family):
    _, tok, _, processor = family
    records = [{"prompt": [{"role": "user", "content": "abc"}]}, {"prompt": "plain text"}]
    with_processor, _ = prepare(records, tok, processor)
    text_only, _ = prepare_prompts(records, tok, PromptFormat(200, chat_template=None), source="s")
    assert [(p.text, p.ids, p.messages, p.conversation) for p in with_processor] == \
        [(p.text, p.ids, p.messages, p.conversation) for p in text_only]
    assert all(p.image_inputs is None and p.images == () for p in with_processor)


def test_the_length_limit_counts_image_tokens(family):
    name, tok, _, processor = family
    (text,), _ = prepare([{"prompt": "ab"}], tok, processor)
    (pictured,), _ = prepare([{"prompt": "ab", "images": [png()] * 3}], tok, processor)
    assert len(pictured.ids) > len(text.ids) + 3 * IMAGE_TOKENS[name] - 1
    records = [{"prompt": "ab", "images": [png()] * 3}, {"prompt": "ab"}]
    (only,), dropped = prepare(records, tok, processor, max_prompt_tokens=len(pictured.ids) - 1)
    assert dropped == 1 and only.images == ()


def test_a_bad_image_is_an_error_naming_the_row_and_column(family):
    _, tok, _, processor = family
    records = [{"prompt": "a", "images": [png()]}, {"prompt": "b", "images": [b"not an image"]}]
    with pytest.raises(DataError, match=r"data.train_path row 2, column 'images'.*not a readable image"):
        prepare(records, tok, processor)


def test_bad_images_skip_drops_the_row_and_counts_it(family):
    _, tok, _, processor = family
    options = ImageOptions(column="images", bad="skip")
    records = [{"prompt": "a", "images": [png()]}, {"prompt": "b", "images": ["missing.png"]}, {"prompt": "c"}]
    items, dropped = prepare(records, tok, processor, images=options)
    assert [len(i.images) for i in items] == [1, 0] and dropped == 0
    assert len(options.skipped) == 1 and "row 2" in options.skipped[0] and "missing.png" in options.skipped[0]


def test_images_with_a_text_only_model_are_a_clear_error():
    tok = build_vision_tokenizer(ALPHABET, "qwen2_vl")
    with pytest.raises(DataError, match="text-only model"):
        prepare([{"prompt": "a", "images": [png()]}], tok, None)
