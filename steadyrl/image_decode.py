"""Decoding an untrusted image: the one place that says which formats are read, checks a data
URL's declared type against the decoded one, and bounds the decoder's work.

Every image steadyrl decodes goes through :func:`decode` (or :func:`check_pil` for a PIL image
handed over in memory): a data row's (:mod:`steadyrl.data.images`) and an observation's or a
gateway request's (:mod:`steadyrl.agents.images`). The rules, in the order they are applied:

* **Formats.** Only :data:`FORMATS` are opened (Pillow's ``formats=``): every other plugin is
  never tried. Some Pillow plugins start outside programs (EPS and PostScript run Ghostscript on
  the file's PostScript), which an image from a data file, a tool or an agent must never do.
* **Declared type.** A ``data:image/<type>;base64,`` URL declares its type; the type must be one
  of :data:`DECLARED` (``image/png``, ``image/jpeg``, ...), and the decoded format must be one of
  the formats it names: ``data:image/png;base64,<a JPEG>`` is refused, not read as a JPEG.
* **Pixels.** ``width x height`` is read from the header and refused above the caller's limit
  before a pixel is decoded (a decompression bomb costs nothing).
* **Decoder work.** A baseline JPEG is decoded in one pass over its coefficients, but a
  progressive one is decoded once per *scan*: the work is ``scans x pixels``. A scan can be 28
  bytes, so a 78 KB file of 1,000 repeated scans at 12.8 Mpix costs ~9 s to decode. The scans
  (SOS markers) are counted before decoding, by a linear walk of the marker structure as libjpeg
  reads it (segments skipped by their length, entropy-coded data to its next marker, up to the
  first EOI), and more than :data:`MAX_JPEG_SCANS` are refused; a JPEG-compressed TIFF is counted
  strip by strip (at most :data:`MAX_JPEG_SCANS` per strip on average). libjpeg's own default
  progressive script has 10 scans for a colour image and at most 18 for CMYK. Every other format
  read decodes in time linear in its bytes and pixels, both capped.

A refusal is an :class:`ImageRefused` whose message says why; the caller prefixes the field or
row. Nothing here imports torch, and Pillow only when an image is decoded.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import warnings

__all__ = ["DECLARED", "FORMATS", "MAX_JPEG_SCANS", "ImageRefused", "check_pil", "decode", "declared_formats",
           "jpeg_scans", "media_type", "split_data_url"]

FORMATS = ("PNG", "JPEG", "MPO", "GIF", "BMP", "WEBP", "TIFF", "PPM")
"""The image formats read (Pillow's names), for every image path. Others are never opened: some
Pillow plugins run outside programs (EPS runs Ghostscript)."""

_OPENERS = tuple(f for f in FORMATS if f != "MPO")
"""The Pillow openers tried: an MPO (a camera's JPEG with more frames) is opened by the JPEG opener,
and ``MPO`` is no opener (naming it made Pillow raise ``KeyError`` for every format after it)."""

DECLARED = {
    "png": ("PNG",), "x-png": ("PNG",), "apng": ("PNG",),
    "jpeg": ("JPEG", "MPO"), "jpg": ("JPEG", "MPO"), "pjpeg": ("JPEG", "MPO"),  # a camera's JPEG opens as MPO
    "gif": ("GIF",), "bmp": ("BMP",), "x-bmp": ("BMP",), "x-ms-bmp": ("BMP",), "webp": ("WEBP",),
    "tiff": ("TIFF",), "tif": ("TIFF",),
    "x-portable-pixmap": ("PPM",), "x-portable-graymap": ("PPM",), "x-portable-bitmap": ("PPM",),
    "x-portable-anymap": ("PPM",),
}
"""A data URL's ``image/<type>`` (lower case) -> the Pillow formats its bytes may decode as."""

MAX_JPEG_SCANS = 32
"""Most scans a JPEG may have (each is one more pass over every coefficient it covers)."""

_JPEG_COMPRESSIONS = (6, 7)  # TIFF's Compression tag: old-style and new-style JPEG
_MARKER = re.compile(rb"(?<!\xff)\xff+(?=[^\x00\xff])")  # a marker's run of 0xFF (never from its middle)
_FILL = re.compile(rb"\xff*")


class ImageRefused(ValueError):
    """An image that is not read: the message says why (the caller names the field or the row)."""


def declared_formats(media: str) -> tuple[str, ...]:
    """The Pillow formats a declared ``image/<type>`` may decode as; :class:`ImageRefused` for a
    type not read."""
    subtype = media.strip().lower().removeprefix("image/")
    if subtype not in DECLARED:
        raise ImageRefused(f"the data URL declares {media!r}, which is not read; the image types read are "
                           f"{', '.join('image/' + t for t in DECLARED)}")
    return DECLARED[subtype]


def split_data_url(url: str, max_bytes: int, bytes_name: str) -> tuple[str, bytes]:
    """``(declared type, bytes)`` of a ``data:image/<type>;base64,<data>`` URL: the type checked
    (:func:`declared_formats`), the base64's length checked against ``max_bytes`` before it is
    decoded, then decoded strictly."""
    comma = url.find(",", 0, 256)
    head = url[:comma].lower() if comma >= 0 else ""
    if not head.startswith("data:image/") or not head.endswith(";base64"):
        raise ImageRefused(f"expected a data:image/<type>;base64,<data> URL, got {url[:40]!r}"
                           f"{'...' if len(url) > 40 else ''}")
    media = head[len("data:"):].split(";", 1)[0]
    declared_formats(media)
    encoded = url[comma + 1:]
    if len(encoded) > (max_bytes + 2) // 3 * 4:
        raise ImageRefused(f"the data URL holds more than {max_bytes} bytes ({len(encoded)} characters of "
                           f"base64): larger than {bytes_name} allows")
    try:
        return media, base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRefused("the data URL is not valid base64") from None


def media_type(data: bytes) -> str:
    """The ``image/<type>`` that ``data``'s first bytes announce (what a data URL made of them
    declares); ``image/png`` when they announce none of :data:`FORMATS` (the decoder then refuses it)."""
    starts = ((b"\x89PNG", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF8", "gif"), (b"BM", "bmp"),
              (b"II*\x00", "tiff"), (b"MM\x00*", "tiff"))
    for magic, subtype in starts:
        if data.startswith(magic):
            return "image/" + subtype
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:1] == b"P" and data[1:2] in b"123456" and len(data) > 1:
        return "image/x-portable-anymap"
    return "image/png"


def jpeg_scans(data: bytes | memoryview, start: int = 0, end: int | None = None) -> int:
    """How many scans (SOS markers) libjpeg would decode in the JPEG stream ``data[start:end]``:
    markers are found as libjpeg finds them (any run of 0xFF, then a byte that is neither 0x00
    nor 0xFF), a segment's payload is skipped by its length, RSTn markers are passed, and the
    count stops at the first EOI. Linear in the bytes."""
    end = len(data) if end is None else min(end, len(data))
    pos, scans = start, 0
    while pos < end:
        if data[pos] == 0xFF:  # where a marker is due: its fill bytes
            at = _FILL.match(data, pos, end).end()
        else:  # inside entropy-coded data, or garbage libjpeg would skip
            found = _MARKER.search(data, pos, end)
            if found is None:
                break
            at = found.end()
        if at >= end:
            break
        marker, pos = data[at], at + 1
        if marker == 0x00 or 0xD0 <= marker <= 0xD8 or marker == 0x01:  # stuffed byte, RSTn, SOI, TEM
            continue
        if marker == 0xD9:  # EOI: decoding stops here
            break
        if marker == 0xDA:
            scans += 1
        if pos + 2 > end:
            break
        pos += max(2, int.from_bytes(data[pos:pos + 2], "big"))  # the segment's payload (a scan's header)
    return scans


def _tiff_jpeg_scans(image, data: bytes) -> tuple[int, int]:
    """``(scans, strips)`` of a JPEG-compressed TIFF: each strip or tile is a JPEG stream."""
    tags = image.tag_v2
    offsets, counts = (tags.get(324) or tags.get(273) or ()), (tags.get(325) or tags.get(279) or ())
    offsets = [offsets] if isinstance(offsets, int) else offsets
    counts = [counts] if isinstance(counts, int) else counts
    if sum(int(c) for c in counts) > len(data):
        raise ImageRefused(f"its JPEG strips claim {sum(int(c) for c in counts)} bytes, more than the file's "
                           f"{len(data)}")
    scans = sum(jpeg_scans(data, int(o), int(o) + int(c)) for o, c in zip(offsets, counts))
    return scans, max(1, len(offsets))


def _check_work(image, data: bytes) -> None:
    """Refuse, before decoding, an image whose decoding would take more than its pixels' work."""
    if image.format in ("JPEG", "MPO"):
        scans, strips = jpeg_scans(data), 1
    elif image.format == "TIFF" and image.tag_v2.get(259) in _JPEG_COMPRESSIONS:
        if image.tag_v2.get(259) == 6:
            raise ImageRefused("an old-style JPEG-compressed TIFF (Compression 6, deprecated since 1995) is not "
                               "read: save it as PNG, JPEG or a new-style TIFF")
        scans, strips = _tiff_jpeg_scans(image, data)
    else:
        return
    if scans > MAX_JPEG_SCANS * strips:
        raise ImageRefused(f"a JPEG of {scans} scans, more than {MAX_JPEG_SCANS}"
                           f"{f' x {strips} strips' if strips > 1 else ''}: decoding repeats its work once per "
                           "scan (a progressive-JPEG bomb); refused before decoding")


def _check_pixels(image, max_pixels: int, pixels_name: str) -> None:
    width, height = image.size
    if width * height > max_pixels:
        raise ImageRefused(f"{width} x {height} = {width * height} pixels, more than {pixels_name} = {max_pixels}")
    if width < 1 or height < 1:
        raise ImageRefused(f"an empty image ({width} x {height})")


def _open(data: bytes, max_pixels: int, pixels_name: str):
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            return Image.open(io.BytesIO(data), formats=_OPENERS)  # the header only; no other plugin is tried
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ImageRefused(f"a decompression bomb: its header claims more pixels than {pixels_name} = "
                           f"{max_pixels} allows ({str(err).split(',')[0]})") from None
    except Exception as err:  # noqa: BLE001 - hostile bytes: whatever a plugin raises is "not an image"
        raise ImageRefused(f"not a readable image in one of the formats {list(FORMATS)} "
                           f"({type(err).__name__}: {str(err)[:120]})") from None


def decode(data: bytes, *, max_pixels: int, pixels_name: str, declared: str | None = None):
    """``data`` decoded as an RGB ``PIL.Image`` (a copy holding no reference to ``data``), after the
    module's checks: format, ``declared`` type (a data URL's ``image/<type>``), pixels, decoder work."""
    image = _open(data, max_pixels, pixels_name)
    if declared is not None and image.format not in declared_formats(declared):
        raise ImageRefused(f"the data URL declares {declared} but its bytes are a {image.format} image; the "
                           "declared type must be the image's own")
    _check_pixels(image, max_pixels, pixels_name)  # before a single pixel is decoded
    _check_work(image, data)
    try:
        image.load()
        return image.convert("RGB")
    except Exception as err:  # noqa: BLE001 - a truncated or corrupt body, whatever the plugin raises
        raise ImageRefused(f"not a readable image: corrupt or truncated ({type(err).__name__}: "
                           f"{str(err)[:120]})") from None


def check_pil(image, *, max_pixels: int, max_bytes: int, pixels_name: str):
    """A PIL image handed over in memory, as an RGB image: one drawn in memory (no format) is
    converted; one opened from a file and not decoded yet is decoded from its file's bytes as
    :func:`decode` decodes them (its format and work checked first); a decoded one must be of
    :data:`FORMATS`."""
    _check_pixels(image, max_pixels, pixels_name)
    if image.format is not None and image.format not in FORMATS:
        raise ImageRefused(f"format {image.format} is not one of {list(FORMATS)}")
    fp = getattr(image, "fp", None)
    pixels = image.__dict__["_im"] if "_im" in image.__dict__ else image.__dict__.get("im")  # Pillow >= 11, older
    if image.format is not None and pixels is None and fp is not None:  # opened, not decoded yet
        try:
            fp.seek(0)
            data = fp.read(max_bytes + 1)
        except (OSError, ValueError, AttributeError) as err:
            raise ImageRefused(f"a lazily opened image whose file cannot be read ({type(err).__name__})") from None
        if len(data) > max_bytes:
            raise ImageRefused(f"its file has more than {max_bytes} bytes")
        return decode(data, max_pixels=max_pixels, pixels_name=pixels_name)
    try:
        return image.convert("RGB")  # a copy: the sender may draw on its image afterwards
    except Exception as err:  # noqa: BLE001 - a lazily opened, corrupt file
        raise ImageRefused(f"not a readable image ({type(err).__name__})") from None
