"""Images of prompt rows, for vision-language models (docs/vision-data.md).

A row's images come from its image column (``data.image_column``; null = ``images`` or ``image``
when the data has one) and from the image parts of a conversational prompt:

* a column value is a path (a relative one is resolved against the data file's folder), a PIL
  image, raw bytes, a ``datasets`` Image feature (``{"bytes": ..., "path": ...}``), a
  ``data:image/...;base64,`` URL, or a list of these;
* a prompt message's content may hold ``{"type": "image"}`` parts (TRL / transformers): each
  takes the row's next column image, in order; a part that carries its own image
  (``{"type": "image", "image": <value>}`` — or ``url`` / ``path`` — or OpenAI's
  ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``) uses that one.
  The number of bare parts must equal the number of column images. A chat prompt with no image
  part gets its column images at the start of its first user message, as TRL does; a string
  prompt becomes one user message, images first.

Every image is checked at start-up, before training, by :mod:`steadyrl.image_decode` (the same
rules as an observation's): its bytes are capped (:func:`byte_limit`), only the
:data:`~steadyrl.image_decode.FORMATS` are opened (EPS, for one, would run Ghostscript), a data
URL's declared ``image/<type>`` must be the decoded format, its size is read from the file's header
and refused above ``data.max_image_pixels`` *before* the pixels are decoded (a decompression bomb
costs nothing), a JPEG's scans are counted and refused above
:data:`~steadyrl.image_decode.MAX_JPEG_SCANS` before decoding (a progressive-JPEG bomb), then it is
decoded in full (a truncated or corrupt file fails here, not mid-run) and converted to RGB.
``http(s)://`` URLs are refused (no network), as is a symbolic link anywhere in a relative path
(steadyrl never follows links: steadyrl/files.py). A bad image is a
:class:`~steadyrl.errors.DataError` naming the row, the column and the value
(``data.bad_images: error``), or the row is skipped and counted (``data.bad_images: skip``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, DataError
from ..image_decode import FORMATS, ImageRefused, check_pil, decode, split_data_url

__all__ = ["FORMATS", "ImageOptions", "IMAGE_COLUMNS", "byte_limit", "image_column_of", "load_image", "load_images",
           "looks_like_image", "prompt_with_images"]

IMAGE_COLUMNS = ("images", "image")
"""The columns ``data.image_column: null`` looks for, in this order."""

PIXELS_NAME = "data.max_image_pixels"  # the limit a refusal names

_PART_KEYS = ("image", "url", "path")  # where a {"type": "image"} part may carry its own image


@dataclass
class ImageOptions:
    """How a source's images are loaded: the column, the folder relative paths start from, the
    limits (``data.max_image_pixels``, ``data.max_images_per_prompt``), ``bad`` (``error`` or
    ``skip``) and, filled in, ``skipped``: the messages of the rows skipped."""

    column: str | None = None
    folder: str | None = None
    max_pixels: int = 12_845_056
    max_per_prompt: int = 8
    bad: str = "error"
    skipped: list[str] = field(default_factory=list)

    def for_folder(self, folder: str | None) -> "ImageOptions":
        """The same options for a source in ``folder`` (its skipped rows counted here too)."""
        out = ImageOptions(self.column, folder, self.max_pixels, self.max_per_prompt, self.bad)
        out.skipped = self.skipped
        return out


def byte_limit(max_pixels: int) -> int:
    """The most bytes one encoded image may have: 4 per pixel (an uncompressed RGBA bitmap) plus 1 MiB."""
    return 4 * max_pixels + (1 << 20)


def image_column_of(records: list[dict], configured: str | None, *, strict: bool = True) -> str | None:
    """The image column of ``records``: ``configured`` (with ``strict``, a :class:`DataError` when
    no record has it), else the first of :data:`IMAGE_COLUMNS` that a record has, else None."""
    if configured is not None:
        if strict and records and not any(configured in r for r in records):
            columns = sorted({k for r in records for k in r})
            raise DataError(f"data.image_column = {configured!r}: no row has that column; columns: {columns}")
        return configured
    return next((name for name in IMAGE_COLUMNS if any(name in r for r in records)), None)


_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff")


def looks_like_image(value) -> bool:
    """Whether a column value looks like images (what a text model refuses when the column was
    found by name, not configured): bytes, a PIL image, an Image feature dict, a data:image URL, a
    path with an image file's extension, or a list holding one. A plain text value does not."""
    if isinstance(value, (list, tuple)):
        return any(looks_like_image(v) for v in value)
    if isinstance(value, str):
        return value.startswith("data:image/") or value.lower().endswith(_IMAGE_SUFFIXES)
    if isinstance(value, dict):
        return "bytes" in value or "path" in value
    return isinstance(value, (bytes, bytearray, memoryview)) or type(value).__module__.startswith("PIL.")


def _short(value) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _bad(where: str, value, why: str) -> DataError:
    return DataError(f"{where}: image {_short(value)}: {why}. Valid: a path (relative to the data file's folder), "
                     "a PIL image, bytes, a datasets Image {'bytes', 'path'}, a data:image/...;base64 URL, or a "
                     "list of these")


def _read_path(text: str, folder: str | None, limit: int, where: str) -> bytes:
    path = Path(text).expanduser()
    base = Path(folder) if folder else Path.cwd()
    full = path if path.is_absolute() else base / path
    if not path.is_absolute():  # no link anywhere below the data folder: it could point anywhere
        step = base
        for part in path.parts:
            step = step / part
            if step.is_symlink():
                raise _bad(where, text, f"{str(step)!r} is a symbolic link; steadyrl never follows links "
                                         "(steadyrl/files.py): give the image file itself")
    from ..files import read_bytes_nofollow

    try:
        size = full.lstat().st_size
        if size <= limit:
            return read_bytes_nofollow(full)
    except FileNotFoundError:
        raise _bad(where, text, f"no such file {str(full)!r}") from None
    except ConfigError as err:  # a link or a device
        raise _bad(where, text, str(err)) from None
    except (OSError, ValueError) as err:  # a name too long, a NUL byte in it
        raise _bad(where, text, f"unreadable: {getattr(err, 'strerror', None) or err}") from None
    raise _bad(where, text, f"the file has {size} bytes, more than {limit} (data.max_image_pixels)")


def _refused(where: str, value, err) -> DataError:
    return _bad(where, value, str(err))


def _decode(data: bytes, value, max_pixels: int, where: str, declared: str | None = None):
    """``data`` decoded by :func:`steadyrl.image_decode.decode` (formats, declared type, pixels, decoder work)."""
    try:
        return decode(data, max_pixels=max_pixels, pixels_name=PIXELS_NAME, declared=declared)
    except ImageRefused as err:
        raise _refused(where, value, err) from None


def load_image(value, *, folder: str | None = None, max_pixels: int = 12_845_056, where: str = "image"):
    """One image as an RGB ``PIL.Image``, checked (see the module docstring); ``where`` names the
    row and column in errors."""
    from PIL import Image

    limit = byte_limit(max_pixels)
    if isinstance(value, Image.Image):
        try:
            return check_pil(value, max_pixels=max_pixels, max_bytes=limit, pixels_name=PIXELS_NAME)
        except ImageRefused as err:
            raise _refused(where, value, err) from None
    if isinstance(value, dict):  # a datasets Image feature
        if value.get("bytes") is not None:
            return load_image(value["bytes"], folder=folder, max_pixels=max_pixels, where=where)
        if value.get("path") is not None:
            return load_image(value["path"], folder=folder, max_pixels=max_pixels, where=where)
        raise _bad(where, value, "an Image feature dict needs 'bytes' or 'path'")
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) > limit:
            raise _bad(where, value, f"more than {limit} bytes (data.max_image_pixels)")
        return _decode(bytes(value), value, max_pixels, where)
    if isinstance(value, str):
        if value.startswith("data:"):
            try:
                declared, data = split_data_url(value, limit, PIXELS_NAME)
            except ImageRefused as err:
                raise _refused(where, value, err) from None
            return _decode(data, value, max_pixels, where, declared)
        if "://" in value:
            raise _bad(where, value, "a URL: steadyrl reads no images from the network; download the images and "
                                     "give their paths, or embed them as data:image/...;base64 URLs")
        if not value.strip():
            raise _bad(where, value, "an empty path")
        return _decode(_read_path(value, folder, limit, where), value, max_pixels, where)
    if isinstance(value, os.PathLike):
        return load_image(os.fspath(value), folder=folder, max_pixels=max_pixels, where=where)
    raise _bad(where, value, f"a {type(value).__name__} is not an image")


def load_images(value, options: ImageOptions, where: str) -> list:
    """The images of one column value (None: none; a list: each), at most ``options.max_per_prompt``."""
    if value is None:
        return []
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) > options.max_per_prompt:
        raise DataError(f"{where}: {len(values)} images, more than data.max_images_per_prompt = "
                        f"{options.max_per_prompt}")
    return [load_image(v, folder=options.folder, max_pixels=options.max_pixels, where=where) for v in values]


def _is_image_part(part) -> bool:
    return isinstance(part, dict) and part.get("type") in ("image", "image_url")


def _part_value(part: dict):
    """The image a part carries itself, or None for a bare ``{"type": "image"}``."""
    if part.get("type") == "image_url":
        url = part.get("image_url")
        return url.get("url") if isinstance(url, dict) else url
    return next((part[k] for k in _PART_KEYS if part.get(k) is not None), None)


def _with_column_images(prompt, n: int):
    """``prompt`` with ``n`` bare image parts in front: a string as one user message, a chat
    prompt with no image part in its first user message (TRL's convention)."""
    parts = [{"type": "image"} for _ in range(n)]
    if isinstance(prompt, str):
        return [{"role": "user", "content": parts + [{"type": "text", "text": prompt}]}]
    messages = [dict(m) for m in prompt]
    first = next((m for m in messages if m.get("role") == "user"), messages[0])
    content = first["content"]
    first["content"] = parts + ([{"type": "text", "text": content}] if isinstance(content, str) else list(content))
    return messages


def prompt_with_images(record: dict, options: ImageOptions, where: str) -> tuple[object, tuple]:
    """``(prompt, images)`` of one record: the prompt with every image part made a bare
    ``{"type": "image"}`` (what the processor's chat template renders as the placeholder), and
    the loaded images in the order of those parts. A record with no image: as it is, ``()``."""
    column = options.column
    column_images = load_images(record.get(column), options, f"{where}, column {column!r}") if column else []
    prompt = record["prompt"]
    parts = [] if not isinstance(prompt, list) else [
        p for m in prompt if isinstance(m.get("content"), list) for p in m["content"] if _is_image_part(p)]
    if not parts:  # a string prompt, or a chat prompt with no image part
        if not column_images:
            return prompt, ()
        return _with_column_images(prompt, len(column_images)), tuple(column_images)
    bare = sum(_part_value(p) is None for p in parts)
    if bare != len(column_images):
        held = (f"column {column!r} holds {len(column_images)} image(s)" if column else
                "the data has no image column (data.image_column, or a column named 'images' / 'image')")
        raise DataError(f"{where}: the prompt has {bare} image part(s) without an image of their own "
                        f"({{'type': 'image'}}) but {held}; they must be as many (each bare part takes the next "
                        "column image, in order)")
    if len(parts) > options.max_per_prompt:
        raise DataError(f"{where}: {len(parts)} images, more than data.max_images_per_prompt = "
                        f"{options.max_per_prompt}")
    images, queue, messages = [], iter(column_images), []
    for message in prompt:
        content = message.get("content")
        if not isinstance(content, list):
            messages.append(message)
            continue
        new = []
        for part in content:
            if _is_image_part(part):
                value = _part_value(part)
                images.append(next(queue) if value is None else load_image(
                    value, folder=options.folder, max_pixels=options.max_pixels, where=f"{where}, prompt image part"))
                part = {"type": "image"}
            new.append(part)
        messages.append({**message, "content": new})
    return messages, tuple(images)
