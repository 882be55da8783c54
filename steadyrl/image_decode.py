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
  first EOI), and more than :data:`MAX_JPEG_SCANS` are refused; a JPEG of more than
  :data:`MAX_JPEG_SEGMENTS` segments or :data:`MAX_JPEG_LOOSE_BYTES` loose bytes before its first
  scan is refused before Pillow parses its header in Python; a JPEG-compressed TIFF is counted
  strip by strip (at most :data:`MAX_JPEG_SCANS` per strip on average), each strip's JPEG frame no
  larger than the strip. A TIFF is decoded by libtiff, which reads its tags itself: a tag listed
  twice (Pillow keeps the last, libtiff the first) is refused, and whole tiles, past the image's
  edges, count against the pixel limit. libjpeg's own default
  progressive script has 10 scans for a colour image and at most 18 for CMYK. A GIF's comment
  sub-blocks before its first frame, which Pillow's opener joins in time quadratic in their number,
  are counted before it is opened and refused above :data:`MAX_GIF_COMMENT_BLOCKS`, and a PNG's
  chunks or a GIF's extension sub-blocks (each read in Python) above :data:`MAX_PNG_CHUNKS` plus
  one per 4 KiB. What Pillow
  decodes in Python (an RLE BMP, a PPM of maxval other than 255, a plain-text PPM) is held to
  :data:`MAX_PYTHON_DECODED_PIXELS`. Every other format read decodes in time linear in its bytes
  and pixels, both capped.

A refusal is an :class:`ImageRefused` whose message says why; the caller prefixes the field or
row. Nothing here imports torch, and Pillow only when an image is decoded.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import warnings

__all__ = ["DECLARED", "FORMATS", "MAX_GIF_COMMENT_BLOCKS", "MAX_JPEG_LOOSE_BYTES", "MAX_JPEG_SCANS",
           "MAX_JPEG_SEGMENTS", "MAX_PNG_CHUNKS", "MAX_PYTHON_DECODED_PIXELS", "ImageRefused", "check_pil", "decode",
           "declared_formats", "gif_blocks", "jpeg_scans", "media_type", "png_chunks", "split_data_url"]

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

MAX_JPEG_SEGMENTS = 4096
"""Most segments (markers with a length: APPn, COM, DQT, DHT, SOS ...) a JPEG may have; a camera's
has a few dozen, 255 ICC chunks at most. Each is walked in Python (by Pillow's header parser too,
before the first scan): 2^20 empty COM segments (4 MiB) took 6 s before a pixel was decoded."""

MAX_JPEG_LOOSE_BYTES = 65536
"""Most bytes a JPEG may hold before its first scan outside any segment (junk, extra 0xFF fill):
Pillow's header parser reads them one at a time, in Python (4 MiB of fill took 4 s)."""

MAX_PNG_CHUNKS = 4096
"""Most chunks Pillow reads to decode a PNG's first frame (and most extension sub-blocks before a
GIF's first frame), plus one per 4 KiB of the file (libpng writes 8 KiB IDAT chunks): each is read
in Python, so 4 MiB of empty ancillary chunks took 3.6 s to open (a 52 MB data row, about 45 s),
4 MiB of one-byte GIF sub-blocks 1.9 s."""

MAX_GIF_COMMENT_BLOCKS = 1024
"""Most comment sub-blocks (and comment extensions) a GIF may have before its first frame: Pillow's
opener joins them with ``bytes +=``, a copy of everything so far per sub-block, quadratic in their
number (400,000 one-byte comments, 2 MB, took 14 s to open). 1,024 is 256 KiB of comment."""

MAX_PYTHON_DECODED_PIXELS = 2 ** 18
"""Most pixels an image may have where Pillow decodes it in Python, not C (:data:`_PYTHON_DECODERS`:
an RLE-compressed BMP, a PPM whose maxval is not 255, a plain-text PBM/PGM/PPM): 0.3 to 5 us a
pixel, so 262,144 pixels (512 x 512) are at most about a second; a 15 KB RLE BMP of 3584 x 3584
took 3.5 s, a 3 MB PPM of maxval 254 4.8 s."""

_PYTHON_DECODERS = frozenset({"bmp_rle", "ppm", "ppm_plain"})  # Pillow's codecs written in Python
_JPEG_COMPRESSIONS = (6, 7)  # TIFF's Compression tag: old-style and new-style JPEG
_MARKER = re.compile(rb"(?<!\xff)\xff+(?=[\xc0-\xcf\xd9-\xfe])")  # the 0xFF run before a marker with a length, or
# EOI (never from the run's middle); the others (RSTn, SOI, TEM, reserved) are passed over here, in C, as the walk
# passes them: a flood of them costs no Python
_FILL = re.compile(rb"\xff*")
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn (0xC4 DHT, 0xC8 JPG, 0xCC DAC are not)
_GIF_BLOCK = re.compile(rb"[!,;]")  # a GIF extension, image or trailer (Pillow passes over other bytes)


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


def _jpeg_walk(data: bytes | memoryview, start: int = 0, end: int | None = None,
               max_segments: int | None = None) -> tuple[int, int, int, int]:
    """``(scans, frame pixels, segments, loose bytes)`` of the JPEG stream ``data[start:end]``: how
    many scans (SOS markers) libjpeg would decode, the largest ``height x width`` a frame header
    (SOFn) states, how many segments (markers with a length) were walked (the walk ends once there
    are more than ``max_segments``) and how many bytes before the first scan are in no segment
    (junk, extra 0xFF fill: Pillow's header parser reads those a byte at a time, in Python);
    markers are found as libjpeg finds them (any run of 0xFF, then a byte that is neither 0x00
    nor 0xFF), a segment's payload is skipped by its length, RSTn markers are passed, and the
    count stops at the first EOI. A reserved marker below 0xC0 has no length: where a restart is
    due, libjpeg's ``jpeg_resync_to_restart`` discards it and scans on to the next marker, so the
    bytes after it are read as markers, not skipped as a payload. Linear in the bytes."""
    end = len(data) if end is None else min(end, len(data))
    pos, scans, pixels, segments, loose = start, 0, 0, 0, 0
    while pos < end and (max_segments is None or segments <= max_segments):
        if data[pos] == 0xFF:  # where a marker is due: its fill bytes
            at = _FILL.match(data, pos, end).end()
        else:  # inside entropy-coded data, or garbage libjpeg would skip
            found = _MARKER.search(data, pos, end)
            if found is None:
                break
            at = found.end()
        if scans == 0:
            loose += at - 1 - pos  # the bytes before the marker's own 0xFF
        if at >= end:
            break
        marker, pos = data[at], at + 1
        if marker < 0xC0 or 0xD0 <= marker <= 0xD8:  # stuffed byte, TEM, RSTn, SOI: no length
            continue  # (0x02-0xBF: libjpeg discards one at a restart and scans on to the next marker)
        if marker == 0xD9:  # EOI: decoding stops here
            break
        segments += 1
        if marker == 0xDA:
            scans += 1
        elif marker in _SOF and pos + 7 <= end:  # a frame header: length, precision, height, width
            height, width = int.from_bytes(data[pos + 3:pos + 5], "big"), int.from_bytes(data[pos + 5:pos + 7], "big")
            pixels = max(pixels, height * width)
        if pos + 2 > end:
            break
        pos += max(2, int.from_bytes(data[pos:pos + 2], "big"))  # the segment's payload (a scan's header)
    return scans, pixels, segments, loose


def jpeg_scans(data: bytes | memoryview, start: int = 0, end: int | None = None) -> int:
    """How many scans (SOS markers) libjpeg would decode in the JPEG stream ``data[start:end]``
    (:func:`_jpeg_walk`)."""
    return _jpeg_walk(data, start, end)[0]


def gif_blocks(data: bytes, stop: int) -> tuple[int, int]:
    """``(comment blocks, blocks)``: how many comment sub-blocks and comment extensions, and how many
    sub-blocks and extensions of any kind, precede a GIF's first image, walking its blocks as
    Pillow's opener does (a byte that starts no block is passed over); the walk ends once more than
    :data:`MAX_GIF_COMMENT_BLOCKS` comment blocks or ``stop`` blocks are counted. Linear in the bytes."""
    pos, comments, blocks, end = 13, 0, 0, len(data)
    if end > 10 and data[10] & 0x80:  # the global colour table
        pos += 3 << ((data[10] & 7) + 1)
    while comments <= MAX_GIF_COMMENT_BLOCKS and blocks <= stop:
        found = _GIF_BLOCK.search(data, pos)
        if found is None or found.group() != b"!":  # the first image, the trailer, or the end
            break
        comment, pos = found.end() < end and data[found.end()] == 0xFE, found.end() + 1
        comments, blocks = comments + comment, blocks + 1
        while pos < end and data[pos] and comments <= MAX_GIF_COMMENT_BLOCKS and blocks <= stop:  # sub-blocks
            comments, blocks = comments + comment, blocks + 1
            pos += 1 + data[pos]
        pos += 1
    return comments, blocks


def png_chunks(data: bytes, stop: int) -> int:
    """How many chunks Pillow reads in Python to decode a PNG's first frame: those before its first
    IDAT, its IDAT run and, unless it is animated (acTL), those after it up to IEND, which Pillow
    reads once the pixels are decoded; the walk ends once more than ``stop`` are counted."""
    pos, count, animated, seen_idat, end = 8, 0, False, False, len(data)
    while pos + 8 <= end and count <= stop:
        kind = data[pos + 4:pos + 8]
        if kind == b"IEND":
            break
        if kind == b"IDAT":
            seen_idat = True
        elif seen_idat and animated:  # past an animated PNG's first frame Pillow reads no chunk
            break
        animated = animated or kind == b"acTL"
        count += 1
        pos += 12 + int.from_bytes(data[pos:pos + 4], "big")
    return count


def _tiff_repeated_tag(data: bytes) -> int | None:
    """The first tag a TIFF's first directory (a classic TIFF's or a BigTIFF's) lists twice, or None;
    the walk ends there. Linear in the bytes."""
    order = "little" if data[:2] == b"II" else "big"
    if data[2:4] in (b"+\x00", b"\x00+"):  # BigTIFF: 8-byte offsets and counts, 20-byte entries
        ifd, count_size, entry = int.from_bytes(data[8:16], order), 8, 20
    else:
        ifd, count_size, entry = int.from_bytes(data[4:8], order), 2, 12
    first = ifd + count_size
    count = min(int.from_bytes(data[ifd:first], order), max(0, (len(data) - first) // entry))
    seen = set()
    for at in range(first, first + count * entry, entry):
        tag = int.from_bytes(data[at:at + 2], order)
        if tag in seen:
            return tag
        seen.add(tag)
    return None


def _check_tiff(image, data: bytes, max_pixels: int, pixels_name: str) -> tuple[int, int]:
    """``(scans, strips)`` of a TIFF (``(0, 1)`` unless JPEG-compressed), after refusing one that
    libtiff would decode past its pixels: libtiff reads the tags itself (the first of a repeated
    tag, where Pillow keeps the last: a repeated tag is refused before Pillow opens the file, in
    :func:`_open`), decodes whole tiles (their pixels held to the limit), and accepts a last strip's
    JPEG taller than the strip (every strip's JPEG frame held to the strip's pixels)."""
    tags, (width, height) = image.tag_v2, image.size
    if 273 in tags and 324 in tags:
        raise ImageRefused("a TIFF with both strip offsets and tile offsets: which libtiff decodes is ambiguous")
    if 322 in tags or 323 in tags:  # tiled: libtiff decodes every tile whole, past the image's edges too
        across, down = tags.get(322), tags.get(323)
        if not (isinstance(across, int) and isinstance(down, int) and across > 0 and down > 0):
            raise ImageRefused(f"a TIFF of tiles {across!r} x {down!r}: not a tile size")
        decoded = -(-width // across) * across * (-(-height // down) * down)
        if decoded > max_pixels:
            raise ImageRefused(f"a TIFF of {width} x {height} pixels in tiles of {across} x {down}: libtiff decodes "
                               f"whole tiles, {decoded} pixels, more than {pixels_name} = {max_pixels}")
        segment, offsets, counts = across * down, tags.get(324, ()), tags.get(325, ())
    else:
        rows = tags.get(278, height)
        segment, offsets, counts = width * min(rows if isinstance(rows, int) else height, height), \
            tags.get(273, ()), tags.get(279, ())
    if tags.get(259) not in _JPEG_COMPRESSIONS:
        return 0, 1
    if tags.get(259) == 6:
        raise ImageRefused("an old-style JPEG-compressed TIFF (Compression 6, deprecated since 1995) is not "
                           "read: save it as PNG, JPEG or a new-style TIFF")
    offsets = [offsets] if isinstance(offsets, int) else offsets
    counts = [counts] if isinstance(counts, int) else counts
    if sum(int(c) for c in counts) > len(data):
        raise ImageRefused(f"its JPEG strips claim {sum(int(c) for c in counts)} bytes, more than the file's "
                           f"{len(data)}")
    scans = 0
    for offset, count in zip(offsets, counts):
        strip_scans, pixels, _, _ = _jpeg_walk(data, int(offset), int(offset) + int(count))
        if pixels > segment:
            raise ImageRefused(f"a JPEG-compressed TIFF whose strip or tile holds a JPEG of {pixels} pixels, more "
                               f"than the strip's or tile's {segment}: libtiff would decode all of them")
        scans += strip_scans
    return scans, max(1, len(offsets))


def _check_work(image, data: bytes, max_pixels: int, pixels_name: str) -> None:
    """Refuse, before decoding, an image whose decoding would take more than its pixels' work."""
    slow = sorted({tile[0] for tile in image.tile} & _PYTHON_DECODERS)
    if slow and image.size[0] * image.size[1] > MAX_PYTHON_DECODED_PIXELS:
        raise ImageRefused(f"a {image.format} image of {image.size[0]} x {image.size[1]} pixels that Pillow decodes "
                           f"in Python ({slow[0]}), more than {MAX_PYTHON_DECODED_PIXELS} pixels in that form: save "
                           "it as PNG (or an uncompressed BMP, a PPM of maxval 255)")
    if image.format in ("JPEG", "MPO"):
        scans, strips = jpeg_scans(data), 1
    elif image.format == "TIFF":
        scans, strips = _check_tiff(image, data, max_pixels, pixels_name)
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

    if data[:3] == b"\xff\xd8\xff":  # a JPEG: its markers walked before Pillow's parser reads them in Python
        _, _, segments, loose = _jpeg_walk(data, max_segments=MAX_JPEG_SEGMENTS)
        if segments > MAX_JPEG_SEGMENTS or loose > MAX_JPEG_LOOSE_BYTES:
            raise ImageRefused(f"a JPEG of more than {MAX_JPEG_SEGMENTS} segments or {MAX_JPEG_LOOSE_BYTES} bytes "
                               "outside them before its first scan: each is parsed in Python; refused before "
                               "opening")
    twice = _tiff_repeated_tag(data) if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+") else None
    if twice is not None:  # refused before Pillow reads a directory of up to (bytes / 20) entries in Python
        raise ImageRefused(f"a TIFF whose directory lists tag {twice} twice: Pillow reads the last and libtiff, "
                           "which decodes it, the first")
    allowed = MAX_PNG_CHUNKS + len(data) // 4096
    if data[:8] == b"\x89PNG\r\n\x1a\n" and png_chunks(data, allowed) > allowed:
        raise ImageRefused(f"a PNG of more than {allowed} chunks ({MAX_PNG_CHUNKS} and one per 4 KiB): each is read "
                           "in Python; refused before opening")
    comments, blocks = gif_blocks(data, allowed) if data[:6] in (b"GIF87a", b"GIF89a") else (0, 0)
    if comments > MAX_GIF_COMMENT_BLOCKS:
        raise ImageRefused(f"a GIF of more than {MAX_GIF_COMMENT_BLOCKS} comment sub-blocks before its first frame: "
                           "Pillow's work reading them grows with their number squared; refused before opening")
    if blocks > allowed:
        raise ImageRefused(f"a GIF of more than {allowed} extension sub-blocks before its first frame "
                           f"({MAX_PNG_CHUNKS} and one per 4 KiB): each is read in Python; refused before opening")
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
    _check_work(image, data, max_pixels, pixels_name)
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
