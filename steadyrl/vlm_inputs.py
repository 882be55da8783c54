"""A vision-language model's image inputs beside the token ids: batching them, and the inputs
that are recomputed from the ids.

The *image inputs of one sequence* are a plain ``dict[str, torch.Tensor]`` of the processor's
outputs for that sequence's images, without the token-aligned keys: e.g.
``{"pixel_values": [4, 1176], "image_grid_thw": [1, 3]}`` (Qwen2-VL) or
``{"pixel_values": [1, 3, 28, 28]}`` (LLaVA); ``None`` for a sequence with no image. Rows are
batched by concatenating each key along dim 0 in row order (:func:`collate_image_inputs`):
every family's image tensors hold one leading entry (an image, or a patch row) per image, so the
batch's images stay in the order of their placeholders in the batch's ids, which is how the models
match image features to image tokens.

The token-aligned inputs are never stored: they follow from the exact token ids
(:func:`token_aligned_inputs`): Qwen-VL's ``mm_token_type_ids`` and Gemma 3's ``token_type_ids``
(1 where the id is the config's image token, 0 elsewhere); LLaVA needs none.
"""

from __future__ import annotations

import torch

from .metrics import Metrics
from .vlm import QWEN_VL_MODEL_TYPES

__all__ = ["TOKEN_ALIGNED_KEYS", "collate_image_inputs", "token_aligned_inputs", "image_token_id",
           "image_token_count", "repeat_image_inputs", "image_count", "move_image_inputs", "has_images",
           "computes_own_positions", "model_image_kwargs", "placeholder_token_ids", "image_metrics"]

TOKEN_ALIGNED_KEYS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")
"""Processor outputs laid out along the tokens: recomputed from the ids, never part of image inputs."""

_TOKEN_TYPE_KEY = {**{t: "mm_token_type_ids" for t in QWEN_VL_MODEL_TYPES}, "gemma3": "token_type_ids"}
"""The token-type input each model type's forward reads (1 on image tokens), by ``model_type``."""


def has_images(rows: list | None) -> bool:
    """Whether any row of ``rows`` (image inputs per row, or None) has image inputs."""
    return rows is not None and any(r is not None for r in rows)


def collate_image_inputs(rows: list[dict | None] | None) -> dict | None:
    """One batch's image inputs: each key's tensors concatenated along dim 0 in row order, rows
    with None skipped; None when no row has any. Rows with different keys are an error."""
    present = [(i, r) for i, r in enumerate(rows or ()) if r is not None]
    if not present:
        return None
    first_row, first = present[0]
    keys = sorted(first)
    for i, row in present[1:]:
        if sorted(row) != keys:
            raise ValueError(f"image inputs of row {i} have keys {sorted(row)}, row {first_row}'s have {keys}: "
                             "every row's image inputs must come from the same processor")
    return {k: torch.cat([r[k] for _, r in present], dim=0) for k in keys}


def image_token_id(model_config) -> int | None:
    """The id of the image token ``model_config`` expands each image into, or None."""
    for name in ("image_token_id", "image_token_index"):
        value = getattr(model_config, name, None)
        if isinstance(value, int):
            return value
    return None


def placeholder_token_ids(model_config) -> list[int]:
    """The ids that stand for an image's (or a video's) features: a sequence may hold them only
    where a processor put them for its images, never as sampled tokens (the forward refuses ids
    without features)."""
    ids = [image_token_id(model_config), getattr(model_config, "video_token_id", None)]
    return sorted({i for i in ids if isinstance(i, int)})


def token_aligned_inputs(model_config, input_ids: torch.Tensor) -> dict:
    """The inputs a VLM's forward needs along ``input_ids`` ([B, T]) besides the ids and the mask:
    ``{"mm_token_type_ids": ...}`` for Qwen-VL, ``{"token_type_ids": ...}`` for Gemma 3 (1 on
    image tokens, as int), ``{}`` for a model that reads none (LLaVA) or has no image token."""
    key = _TOKEN_TYPE_KEY.get(getattr(model_config, "model_type", None))
    token = image_token_id(model_config)
    if key is None or token is None:
        return {}
    return {key: (input_ids == token).to(torch.long)}


def image_token_count(model_config, ids: torch.Tensor) -> torch.Tensor:
    """Image tokens in each row of ``ids`` (``[B]`` for ``[B, T]`` ids, a scalar for ``[T]``):
    0 for a model with no image token."""
    token = image_token_id(model_config)
    if token is None:
        return torch.zeros(ids.shape[:-1], dtype=torch.long)
    return (ids == token).sum(-1)


def repeat_image_inputs(rows: list[dict | None] | None, n: int) -> list[dict | None] | None:
    """``rows`` with each entry repeated ``n`` times in place (as ``repeat_interleave`` repeats the
    prompts of a group); the dicts are shared, not copied."""
    if rows is None:
        return None
    return [row for row in rows for _ in range(n)]


def image_count(inputs: dict | None) -> int:
    """How many images one row's (or one batch's) image inputs hold: the rows of
    ``image_grid_thw`` where the family has one (Qwen-VL's pixel rows are patches), else the
    leading size of ``pixel_values``."""
    if not inputs:
        return 0
    if "image_grid_thw" in inputs:
        return int(inputs["image_grid_thw"].shape[0])
    pixels = inputs.get("pixel_values")
    return int(pixels.shape[0]) if pixels is not None else 0


def move_image_inputs(inputs: dict | None, device, dtype: torch.dtype | None = None) -> dict | None:
    """``inputs`` on ``device``, floating tensors cast to ``dtype`` (the model's) when given."""
    if inputs is None:
        return None
    out = {}
    for k, v in inputs.items():
        v = v.to(device)
        out[k] = v.to(dtype) if dtype is not None and v.is_floating_point() else v
    return out


def computes_own_positions(model_config) -> bool:
    """Whether the model computes its own positions from the ids and the images (Qwen-VL's
    multimodal RoPE): it must then get no 1-D text ``position_ids`` with images."""
    return getattr(model_config, "model_type", None) in QWEN_VL_MODEL_TYPES


def model_image_kwargs(model_config, input_ids: torch.Tensor, inputs: dict | None, position_ids,
                       dtype: torch.dtype | None = None) -> dict:
    """The keyword arguments a forward over ``input_ids`` takes besides the ids and the mask: the
    batch's collated image ``inputs`` (on the ids' device, floats in ``dtype``), the token-aligned
    inputs, and ``position_ids`` — None with images for a model that computes its own
    (:func:`computes_own_positions`). Without images: just ``position_ids``."""
    if inputs is None:
        return {"position_ids": position_ids}
    own = computes_own_positions(model_config)
    return {**move_image_inputs(inputs, input_ids.device, dtype), **token_aligned_inputs(model_config, input_ids),
            "position_ids": None if own else position_ids}


def image_metrics(image_inputs: list[dict | None] | None, ids: torch.Tensor, model_config) -> Metrics:
    """``rollout/images_per_step`` (the images of the step's samples, a count over ranks) and
    ``rollout/image_tokens_per_sample`` (the image tokens in ``ids``, ``[B, T]`` prompt + response
    ids of the samples, per sample) of one rank's samples (docs/metrics.md)."""
    metrics = Metrics()
    metrics.count("rollout/images_per_step", sum(image_count(x) for x in image_inputs or ()))
    rows = ids.shape[0]
    if rows:
        metrics.mean("rollout/image_tokens_per_sample", float(image_token_count(model_config, ids).sum()) / rows, rows)
    return metrics
