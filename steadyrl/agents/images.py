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

Image data is hostile: only ``data:image/...;base64,`` URLs are read (no network: ``http(s)``
URLs are refused), their encoded size is checked before decoding (:data:`MAX_IMAGE_BYTES`), the
base64 strictly, the pixel count from the header before the pixels are decoded
(:data:`MAX_IMAGE_PIXELS`: a decompression bomb is refused), and bytes that are no image are an
error naming the field. Every refusal is an :class:`ImageContentError` naming the field.
"""

from __future__ import annotations

import base64
import binascii
import io
import os

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
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


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
    """The image of a ``data:image/...;base64,`` URL (checked as :func:`load_image` checks bytes)."""
    if not isinstance(url, str):
        raise ImageContentError(f"{field}: an image URL must be a string, got {type(url).__name__}")
    head = url[:16].lower()
    if head.startswith(("http://", "https://")):
        raise ImageContentError(f"{field}: image URLs are not fetched (no network); send the image inline as a "
                                "data:image/...;base64, URL")
    comma = url.find(",", 0, 256)
    if not head.startswith("data:image/") or comma < 0 or not url[:comma].endswith(";base64"):
        raise ImageContentError(f"{field}: expected a data:image/<format>;base64,<data> URL, got "
                                f"{url[:40]!r}{'...' if len(url) > 40 else ''}")
    encoded = url[comma + 1:]
    if len(encoded) > (max_bytes + 2) // 3 * 4:  # before decoding: the size the bytes would have
        raise ImageContentError(f"{field}: the image is larger than {max_bytes} bytes "
                                f"({len(encoded)} characters of base64)")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ImageContentError(f"{field}: the image's base64 data is not valid base64") from None
    return _open(data, field, max_bytes, max_pixels)


def _open(data: bytes, field: str, max_bytes: int, max_pixels: int):
    from PIL import Image

    if len(data) > max_bytes:
        raise ImageContentError(f"{field}: the image is larger than {max_bytes} bytes ({len(data)})")
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
    except Image.DecompressionBombError:
        raise ImageContentError(f"{field}: the image has more pixels than Pillow accepts (a decompression bomb); "
                                f"at most {max_pixels} are accepted") from None
    except Exception:  # noqa: BLE001 - hostile bytes: whatever a format plugin raises is "not an image"
        raise ImageContentError(f"{field}: the bytes are not an image Pillow can read") from None
    _check_pixels(image, field, max_pixels)
    try:
        image.load()
        return image.convert("RGB")
    except Exception as err:  # noqa: BLE001 - a truncated or corrupt body, whatever the plugin raises
        raise ImageContentError(f"{field}: the image is corrupt ({type(err).__name__})") from None


def _check_pixels(image, field: str, max_pixels: int) -> None:
    width, height = image.size
    if width < 1 or height < 1 or width * height > max_pixels:
        raise ImageContentError(f"{field}: the image is {width} x {height} pixels; at most {max_pixels} are accepted")


def load_image(value, field: str, *, max_bytes: int = MAX_IMAGE_BYTES, max_pixels: int = MAX_IMAGE_PIXELS):
    """An image part's value as an RGB PIL image: a PIL image, image bytes, a ``data:`` URL or a local
    path; refused with an :class:`ImageContentError` naming ``field`` when it is none of these, too
    large, or not an image."""
    if _is_pil(value):
        _check_pixels(value, field, max_pixels)
        return value.convert("RGB")
    if isinstance(value, (bytes, bytearray)):
        return _open(bytes(value), field, max_bytes, max_pixels)
    if isinstance(value, str) and value[:5].lower() in ("data:", "http:", "https"):
        return decode_data_url(value, field, max_bytes=max_bytes, max_pixels=max_pixels)
    if isinstance(value, (str, os.PathLike)):
        try:
            size = os.path.getsize(value)
            if size > max_bytes:
                raise ImageContentError(f"{field}: the image file {str(value)!r} is larger than {max_bytes} bytes")
            with open(value, "rb") as f:
                data = f.read(max_bytes + 1)
        except OSError as err:
            raise ImageContentError(f"{field}: cannot read the image file {str(value)!r}: {err.strerror}") from None
        return _open(data, field, max_bytes, max_pixels)
    raise ImageContentError(f"{field}: an image must be a PIL image, bytes, a data URL or a path, "
                            f"got {type(value).__name__}")


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
