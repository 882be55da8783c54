"""Images in observations: the content parts a tool, an environment or a gateway agent may send.

An observation message (``tool`` or ``user`` role) may hold a list of content parts instead of text:
``{"type": "text", "text": ...}``, ``{"type": "image", "image": PIL image | bytes | path}`` and
OpenAI's ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``.

* :func:`json_content` makes what a tool or an environment returned JSON-safe where it runs (a
  sandbox worker replies in JSON): a PIL image, or image bytes, become an ``image_url`` part with
  a ``data:`` URL; text stays text.
* :func:`split_images` reads the parts on the trainer's side: each image is decoded and checked
  (:func:`load_image`) and replaced by a bare ``{"type": "image"}`` part, which a vision-language
  model's chat template renders as its image placeholder; the processor then expands that
  placeholder into the image's tokens.

Image data is hostile: an image part holds the image itself (a PIL image, its bytes, or a
``data:image/<type>;base64,`` URL). Nothing else is read: no network (``http(s)`` URLs are
refused) and no local path (a string or ``os.PathLike`` that is not a data URL is refused without
being opened, so a link, a FIFO or ``/etc/shadow`` named by a tool, an environment or a gateway
agent is never touched). The encoded size is checked before decoding (:data:`MAX_IMAGE_BYTES`), the
base64 strictly; then :mod:`steadyrl.image_decode` decodes it under the rules every image path
shares: only its formats are opened (EPS would run Ghostscript), a data URL's declared type must be
the decoded format, the pixel count is read from the header before the pixels are decoded
(:data:`MAX_IMAGE_PIXELS`: a decompression bomb is refused), and a JPEG's scans are counted before
decoding (a progressive-JPEG bomb is refused). Every refusal is an :class:`ImageContentError`
naming the field.
"""

from __future__ import annotations

import base64
import io
import os

from ..image_decode import ImageRefused, check_pil, decode, media_type, split_data_url

__all__ = ["MAX_IMAGE_BYTES", "MAX_IMAGE_PIXELS", "MAX_IMAGES_PER_EPISODE", "ImageContentError", "is_image_part",
           "has_images", "json_content", "load_image", "decode_data_url", "split_images", "image_free"]

MAX_IMAGE_BYTES = 4 * 2**20
"""Largest image accepted in an observation, in bytes of the encoded file (4 MiB; a data URL's
base64 is measured before it is decoded)."""

MAX_IMAGE_PIXELS = 12_845_056
"""Largest image accepted in an observation, in pixels (3584 x 3584, as ``data.max_image_pixels``' default)."""

MAX_IMAGES_PER_EPISODE = 8
"""Most images one episode may hold, the prompt's and the observations' together (as
``data.max_images_per_prompt``' default): an observation past it fails the episode."""

IMAGE_TYPES = ("image", "image_url")


class ImageContentError(ValueError):
    """An image part that cannot be read: not an image, too large, not a data URL ... (names the field)."""


def is_image_part(part) -> bool:
    return isinstance(part, dict) and part.get("type") in IMAGE_TYPES


def has_images(messages: list[dict]) -> bool:
    """Whether any message of ``messages`` holds an image part."""
    return any(isinstance(m.get("content"), list) and any(is_image_part(p) for p in m["content"])
               for m in messages if isinstance(m, dict))


def _is_pil(value) -> bool:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with transformers' vision extras
        return False
    return isinstance(value, Image.Image)


def _data_url(data: bytes) -> str:
    """``data`` as a data URL declaring the type its first bytes announce (the trainer checks it)."""
    return f"data:{media_type(data)};base64," + base64.b64encode(data).decode("ascii")


def _png(image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _json_part(part):
    if _is_pil(part):
        return {"type": "image_url", "image_url": {"url": _data_url(_png(part))}}
    if isinstance(part, dict) and part.get("type") == "image":
        image = part.get("image")
        if _is_pil(image):
            return _json_part(image)
        if isinstance(image, (bytes, bytearray)):
            return {"type": "image_url", "image_url": {"url": _data_url(bytes(image))}}
        return part
    if isinstance(part, str):
        return {"type": "text", "text": part}
    return part


def _is_part(value) -> bool:
    return _is_pil(value) or isinstance(value, dict) and value.get("type") in ("text", *IMAGE_TYPES)


def json_content(value):
    """What a tool or an environment returned, as JSON-safe message content: a PIL image becomes a
    one-part list (an ``image_url`` data URL); a list of content parts (``text``, ``image``,
    ``image_url`` dicts, PIL images, strings beside them) becomes content parts, images as data URLs
    (an ``image`` part's bytes too); anything else is returned as it is."""
    if _is_pil(value):
        return [_json_part(value)]
    if isinstance(value, (list, tuple)) and value and any(_is_part(v) for v in value) and all(
            _is_part(v) or isinstance(v, str) for v in value):
        return [_json_part(v) for v in value]
    return value


def decode_data_url(url, field: str, *, max_bytes: int = MAX_IMAGE_BYTES, max_pixels: int = MAX_IMAGE_PIXELS):
    """The image of a ``data:image/<type>;base64,`` URL: the type one of those read, and the image's
    own (:mod:`steadyrl.image_decode`); checked as :func:`load_image` checks bytes."""
    if not isinstance(url, str):
        raise ImageContentError(f"{field}: an image URL must be a string, got {type(url).__name__}")
    if url[:16].lower().startswith(("http://", "https://")):
        raise ImageContentError(f"{field}: image URLs are not fetched (no network); send the image inline as a "
                                "data:image/...;base64, URL")
    try:
        declared, data = split_data_url(url, max_bytes, "MAX_IMAGE_BYTES")
    except ImageRefused as err:
        raise ImageContentError(f"{field}: {err}") from None
    return _open(data, field, max_bytes, max_pixels, declared)


def _open(data: bytes, field: str, max_bytes: int, max_pixels: int, declared: str | None = None):
    if len(data) > max_bytes:
        raise ImageContentError(f"{field}: the image is larger than {max_bytes} bytes ({len(data)})")
    try:
        return decode(data, max_pixels=max_pixels, pixels_name="MAX_IMAGE_PIXELS", declared=declared)
    except ImageRefused as err:
        raise ImageContentError(f"{field}: {err}") from None


def load_image(value, field: str, *, max_bytes: int = MAX_IMAGE_BYTES, max_pixels: int = MAX_IMAGE_PIXELS):
    """An image part's value as an RGB PIL image: a PIL image, image bytes or a ``data:`` URL;
    refused with an :class:`ImageContentError` naming ``field`` when it is none of these (a local
    path included: module docstring), too large, or not an image."""
    if _is_pil(value):
        try:
            return check_pil(value, max_pixels=max_pixels, max_bytes=max_bytes, pixels_name="MAX_IMAGE_PIXELS")
        except ImageRefused as err:
            raise ImageContentError(f"{field}: {err}") from None
    if isinstance(value, (bytes, bytearray)):
        return _open(bytes(value), field, max_bytes, max_pixels)
    if isinstance(value, str) and value[:5].lower() in ("data:", "http:", "https"):
        return decode_data_url(value, field, max_bytes=max_bytes, max_pixels=max_pixels)
    if isinstance(value, (str, os.PathLike)):  # never opened: not even a link's lstat or a FIFO's open
        raise ImageContentError(f"{field}: {_short(os.fspath(value))} is a local path; an observation's image is "
                                "never read from the trainer's files (a tool, an environment or an agent would "
                                "choose which): send the image itself, as a PIL image, its bytes or a "
                                "data:image/<type>;base64, URL")
    raise ImageContentError(f"{field}: an image must be a PIL image, bytes or a data:image/<type>;base64, URL, "
                            f"got {type(value).__name__}")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _part_image(part: dict, field: str):
    if part["type"] == "image":
        if "image" not in part:
            raise ImageContentError(f"{field}.image: an image part must carry its image")
        return load_image(part["image"], f"{field}.image")
    url = part.get("image_url")
    if isinstance(url, dict):
        return decode_data_url(url.get("url"), f"{field}.image_url.url")
    return decode_data_url(url, f"{field}.image_url")


def split_images(messages: list[dict], field: str = "messages", *, limit: int | None = None) -> tuple[list[dict], list]:
    """``(messages, images)``: ``messages`` with every image part replaced by ``{"type": "image"}``
    (what a VLM's chat template renders as its placeholder) and the decoded images, in order of
    appearance. Raises :class:`ImageContentError` naming the field (``messages[i].content[j]...``),
    also when there are more than ``limit`` images."""
    out, images = [], []
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list) or not any(is_image_part(p) for p in content):
            out.append(message)
            continue
        parts = []
        for j, part in enumerate(content):
            if not is_image_part(part):
                parts.append(part)
                continue
            if limit is not None and len(images) >= limit:
                raise ImageContentError(f"{field}: more than {limit} images")
            images.append(_part_image(part, f"{field}[{i}].content[{j}]"))
            parts.append({"type": "image"})
        out.append({**message, "content": parts})
    return out, images


def image_free(message: dict) -> dict:
    """``message`` with no text: string content emptied, list content kept to its image parts (the
    template's and the images' tokens, which are never cut)."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [p for p in content if is_image_part(p)]}
    return {**message, "content": ""}
