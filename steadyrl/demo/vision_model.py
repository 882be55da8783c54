"""Tiny vision-language models and their processors, built in code (random weights, no download).

Two families, as transformers' own tests build them:

* :func:`build_tiny_qwen2_vl`: a ``Qwen2VLForConditionalGeneration`` (multimodal RoPE, images as
  patch rows with ``image_grid_thw``; a 28 x 28 image is 4 patches of 14, merged 2 x 2 into one
  image token) with a ``Qwen2VLImageProcessor``;
* :func:`build_tiny_llava`: a ``LlavaForConditionalGeneration`` (a CLIP vision tower, a projector,
  a Llama language model; images as ``[n, 3, H, W]`` pixels, one ``<image>`` placeholder expanded
  to one token per patch plus CLS) with a ``CLIPImageProcessor``.

Both use :func:`build_vision_tokenizer`: one token per character of an alphabet plus the chat and
image special tokens, and a ChatML template that renders ``{"type": "image"}`` content parts as the
family's placeholder. Each ``(model, processor)`` round-trips through ``save_pretrained`` /
``AutoModelForImageTextToText.from_pretrained`` and :func:`steadyrl.vlm.load_processor`.
"""

from __future__ import annotations

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast

__all__ = ["VISION_SPECIAL_TOKENS", "build_vision_tokenizer", "build_tiny_qwen2_vl", "build_tiny_llava",
           "chat_template_for"]

PAD, IM_START, IM_END, UNK = "<pad>", "<|im_start|>", "<|im_end|>", "<unk>"
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD, LLAVA_IMAGE = (
    "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<image>")
VISION_SPECIAL_TOKENS = (PAD, IM_START, IM_END, UNK, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD, LLAVA_IMAGE)

_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' or c['type'] == 'image_url' %}IMAGE"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_PLACEHOLDER = {"qwen2_vl": VISION_START + IMAGE_PAD + VISION_END, "llava": LLAVA_IMAGE}


def chat_template_for(family: str) -> str:
    """The ChatML template of ``family`` (``qwen2_vl`` or ``llava``), images as its placeholder."""
    if family not in _PLACEHOLDER:
        raise ValueError(f"family must be one of {sorted(_PLACEHOLDER)}, got {family!r}")
    return _TEMPLATE.replace("IMAGE", _PLACEHOLDER[family])


def build_vision_tokenizer(alphabet: str, family: str = "qwen2_vl", *, model_max_length: int = 512):
    """A character-level tokenizer: :data:`VISION_SPECIAL_TOKENS` (ids 0..8) then one token per
    character of ``alphabet``; EOS is ``<|im_end|>``, padding on the left, ``family``'s template."""
    if not alphabet or len(set(alphabet)) != len(alphabet):
        raise ValueError(f"alphabet must be non-empty with no repeated character, got {alphabet!r}")
    vocab = {tok: i for i, tok in enumerate(VISION_SPECIAL_TOKENS)}
    vocab.update({ch: len(VISION_SPECIAL_TOKENS) + i for i, ch in enumerate(alphabet)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=IM_END, unk_token=UNK, padding_side="left",
        model_max_length=model_max_length, clean_up_tokenization_spaces=False,
        additional_special_tokens=list(VISION_SPECIAL_TOKENS[1:]),
    )
    tokenizer.chat_template = chat_template_for(family)
    return tokenizer


def _ids(tokenizer) -> dict:
    # bos None: the tokenizer has none (Qwen2-VL's config would default to an id past this vocabulary)
    return {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": tokenizer.bos_token_id}


def build_tiny_qwen2_vl(tokenizer, *, hidden_size: int = 32, n_layers: int = 2, n_heads: int = 2,
                        vision_depth: int = 2, image_size: int = 28, seed: int = 0):
    """``(model, processor)``: a random ``Qwen2VLForConditionalGeneration`` over ``tokenizer``
    (:func:`build_vision_tokenizer` with ``family='qwen2_vl'``), and an image-only Qwen2-VL
    processor that resizes every image to ``image_size`` x ``image_size`` pixels."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor

    from ..vlm import image_only_processor

    tid = tokenizer.convert_tokens_to_ids
    head = hidden_size // n_heads
    section = [head // 4, head // 8, head // 2 - head // 4 - head // 8]  # temporal, height, width
    config = Qwen2VLConfig(
        text_config={"vocab_size": len(tokenizer), "hidden_size": hidden_size, "intermediate_size": 2 * hidden_size,
                     "num_hidden_layers": n_layers, "num_attention_heads": n_heads, "num_key_value_heads": n_heads,
                     "max_position_embeddings": 1024, "rope_scaling": {"type": "mrope", "mrope_section": section},
                     "tie_word_embeddings": True, **_ids(tokenizer)},
        vision_config={"depth": vision_depth, "embed_dim": hidden_size, "hidden_size": hidden_size,
                       "num_heads": n_heads, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                       "in_chans": 3, "mlp_ratio": 2},
        image_token_id=tid(IMAGE_PAD), video_token_id=tid(VIDEO_PAD), vision_start_token_id=tid(VISION_START),
        vision_end_token_id=tid(VISION_END), tie_word_embeddings=True, **_ids(tokenizer),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(**_ids(tokenizer))
    pixels = image_size * image_size
    image_processor = Qwen2VLImageProcessor(min_pixels=pixels, max_pixels=pixels, patch_size=14, merge_size=2,
                                            temporal_patch_size=2)
    return model.eval(), image_only_processor(image_processor, tokenizer, tokenizer.chat_template)


def build_tiny_llava(tokenizer, *, hidden_size: int = 32, n_layers: int = 2, n_heads: int = 2,
                     vision_depth: int = 2, image_size: int = 28, seed: int = 0):
    """``(model, processor)``: a random ``LlavaForConditionalGeneration`` (CLIP vision tower, patch
    14) over ``tokenizer`` (:func:`build_vision_tokenizer` with ``family='llava'``), and a
    ``LlavaProcessor`` that resizes and crops every image to ``image_size`` pixels."""
    from transformers import CLIPImageProcessor, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    config = LlavaConfig(
        text_config={"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": hidden_size,
                     "intermediate_size": 2 * hidden_size, "num_hidden_layers": n_layers,
                     "num_attention_heads": n_heads, "num_key_value_heads": n_heads, "max_position_embeddings": 1024,
                     **_ids(tokenizer)},
        vision_config={"model_type": "clip_vision_model", "hidden_size": hidden_size,
                       "intermediate_size": 2 * hidden_size, "num_hidden_layers": vision_depth,
                       "num_attention_heads": n_heads, "image_size": image_size, "patch_size": 14},
        image_token_id=tokenizer.convert_tokens_to_ids(LLAVA_IMAGE), vision_feature_layer=-1,
        vision_feature_select_strategy="default", **_ids(tokenizer),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlavaForConditionalGeneration(config)
    model.generation_config = GenerationConfig(**_ids(tokenizer))
    image_processor = CLIPImageProcessor(size={"shortest_edge": image_size},
                                         crop_size={"height": image_size, "width": image_size})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer,
                               chat_template=tokenizer.chat_template, patch_size=14,
                               vision_feature_select_strategy="default", num_additional_image_tokens=1)
    return model.eval(), processor
