"""steadyrl.image_decode, the one set of rules for every image path (a data row's, an observation's,
a gateway request's): only its formats are opened (an EPS under ``data:image/png`` never reaches
Ghostscript), a data URL's declared type must be the decoded format, a JPEG's scans are counted and
a progressive-JPEG bomb refused before decoding, and an observation part never names a local file."""

from __future__ import annotations

import base64
import io
import os
import signal
import struct
import warnings
import zlib

import pytest
from PIL import Image, ImageFile

import steadyrl.data.images as data_images
import steadyrl.image_decode as image_decode
from steadyrl.agents.images import ImageContentError, decode_data_url, json_content, split_images
from steadyrl.agents.images import load_image as observation_image
from steadyrl.errors import DataError
from steadyrl.gateway.protocol import RequestError, parse_request
from steadyrl.image_decode import (MAX_JPEG_SCANS, MAX_JPEG_SEGMENTS, MAX_PYTHON_DECODED_PIXELS, ImageRefused, decode,
                                   jpeg_scans, media_type, png_chunks)

EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n0 0 moveto 10 10 lineto stroke\nshowpage\n"


def encoded(fmt: str, size=(16, 16), **options) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 40, 90)).save(out, format=fmt, **options)
    return out.getvalue()


def url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64," + base64.b64encode(data).decode()


def scan_bomb(size: int = 512, repeats: int = 1000) -> bytes:
    """A progressive JPEG from Pillow (10 scans) with its last scan (a few bytes) repeated ``repeats`` times."""
    data = encoded("JPEG", (size, size), progressive=True, quality=90)
    last = data.rindex(b"\xff\xda")
    end = data.rindex(b"\xff\xd9")
    return data[:end] + data[last:end] * repeats + data[end:]


def gateway(part: dict):
    return parse_request({"messages": [{"role": "user", "content": [part]}]}, chat=True)


# every path an untrusted image takes: a data row, an observation, a gateway request
def _row(value):
    return data_images.load_image(value, where="row 1, column 'images'")


def _observation(value):
    return observation_image(value, "messages[0].content[0].image")


def _request(value):
    try:
        return gateway({"type": "image_url", "image_url": {"url": value}}).images[0]
    except RequestError as err:
        raise ImageContentError(str(err)) from None


PATHS = [_row, _observation, _request]
REFUSED = (DataError, ImageContentError)


@pytest.fixture
def no_ghostscript(monkeypatch):
    """Record any use of Pillow's EPS plugin: its open (where it reads the PostScript) and Ghostscript."""
    from PIL import EpsImagePlugin

    used = []
    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", lambda self: used.append("open") or 1 / 0)
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", lambda *a, **k: used.append("gs") or 1 / 0)
    monkeypatch.setattr(EpsImagePlugin, "has_ghostscript", lambda: used.append("gs?") or True)
    return used


@pytest.mark.parametrize("read", PATHS)
def test_eps_under_a_png_data_url_never_reaches_the_eps_plugin_or_ghostscript(read, no_ghostscript):
    with pytest.raises(REFUSED, match="not a readable image in one of the formats"):
        read(url(EPS, "image/png"))
    assert no_ghostscript == []


@pytest.mark.parametrize("read", [_row, _observation])
def test_eps_bytes_from_a_tool_or_a_row_never_reach_the_eps_plugin(read, no_ghostscript):
    with pytest.raises(REFUSED):
        read(EPS)
    with pytest.raises(REFUSED, match="not read"):
        read(url(EPS, "image/eps"))  # a declared type outside the list: refused before any decoding
    assert no_ghostscript == []


@pytest.mark.parametrize("read", PATHS)
def test_the_decoded_format_must_be_the_declared_one(read):
    jpeg = encoded("JPEG")
    with pytest.raises(REFUSED, match="declares image/png but its bytes are a JPEG image"):
        read(url(jpeg, "image/png"))
    with pytest.raises(REFUSED, match="declares image/jpeg but its bytes are a PNG image"):
        read(url(encoded("PNG"), "image/jpeg"))
    with pytest.raises(REFUSED, match=r"declares 'image/svg\+xml', which is not read"):
        read(url(b"<svg/>", "image/svg+xml"))
    for media in ("image/jpeg", "image/jpg", "IMAGE/JPEG"):
        assert read(url(jpeg, media)).size == (16, 16)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF", "PPM"])
def test_a_tools_image_bytes_become_a_data_url_declaring_their_own_type(fmt):
    data = encoded(fmt)
    part = json_content([{"type": "image", "image": data}])[0]
    assert part["image_url"]["url"].startswith(f"data:{media_type(data)};base64,")
    assert decode_data_url(part["image_url"]["url"], "f").size == (16, 16)


def test_the_scan_bomb_is_a_small_file_of_many_scans_and_libjpeg_would_decode_it():
    bomb = scan_bomb()
    assert len(bomb) < 30_000 and jpeg_scans(bomb) == 1010
    assert Image.open(io.BytesIO(bomb)).format == "JPEG"  # Pillow opens it: only the count stops it


@pytest.mark.parametrize("read", PATHS)
def test_a_progressive_jpeg_bomb_is_refused_from_its_scan_count_before_decoding(read, monkeypatch):
    decoded = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self) or None)
    with pytest.raises(REFUSED, match=f"a JPEG of 1010 scans, more than {MAX_JPEG_SCANS}"):
        read(url(scan_bomb(), "image/jpeg"))
    assert decoded == []


@pytest.mark.parametrize("read", [_row, _observation])
def test_a_lazily_opened_pil_bomb_is_counted_before_it_is_decoded(read, monkeypatch):
    lazy = Image.open(io.BytesIO(scan_bomb()))  # what an in-process environment or a dataset might hand over
    decoded = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self) or None)
    with pytest.raises(REFUSED, match="1010 scans"):
        read(lazy)
    assert decoded == []


def test_ordinary_jpegs_and_a_jpeg_compressed_tiff_still_decode():
    progressive = encoded("JPEG", (64, 64), progressive=True)
    assert jpeg_scans(progressive) == 10 and jpeg_scans(encoded("JPEG")) == 1
    grey = io.BytesIO()
    Image.new("L", (32, 32), 5).save(grey, format="JPEG", progressive=True)
    cmyk = io.BytesIO()
    Image.new("CMYK", (32, 32), (1, 2, 3, 4)).save(cmyk, format="JPEG", progressive=True)
    for data in (progressive, grey.getvalue(), cmyk.getvalue(), encoded("TIFF", (64, 64), compression="jpeg")):
        assert decode(data, max_pixels=10_000, pixels_name="limit").mode == "RGB"
    assert jpeg_scans(cmyk.getvalue()) <= MAX_JPEG_SCANS


def jpeg_tiff(strip: bytes, size: int) -> bytes:
    """A little-endian TIFF of one strip, compressed as JPEG (Compression 7), the strip's bytes as given."""
    tags = [(256, 3, 1, size), (257, 3, 1, size), (258, 3, 1, 8), (259, 3, 1, 7), (262, 3, 1, 6),
            (273, 4, 1, 0), (277, 3, 1, 3), (278, 3, 1, size), (279, 4, 1, len(strip))]
    ifd_size = 2 + 12 * len(tags) + 4
    tags[5] = (273, 4, 1, 8 + ifd_size)  # the strip right after the IFD
    body = struct.pack("<H", len(tags)) + b"".join(
        struct.pack("<HHI", tag, kind, n) + (struct.pack("<HH", v, 0) if kind == 3 else struct.pack("<I", v))
        for tag, kind, n, v in tags) + struct.pack("<I", 0)
    return b"II*\x00" + struct.pack("<I", 8) + body + strip


def test_a_jpeg_compressed_tiff_strip_of_many_scans_is_refused(monkeypatch):
    decoded = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self) or None)
    bomb = jpeg_tiff(scan_bomb(64, 100), 64)
    assert Image.open(io.BytesIO(bomb)).tag_v2[259] == 7
    with pytest.raises(ImageRefused, match="a JPEG of 110 scans, more than 32: decoding"):
        decode(bomb, max_pixels=10_000, pixels_name="limit")
    assert decoded == []
    fine = jpeg_tiff(encoded("JPEG", (64, 64), progressive=True), 64)
    decode(fine, max_pixels=10_000, pixels_name="limit")  # 10 scans: decoded (load() stubbed here)
    assert decoded != []


def test_marker_bytes_inside_a_segment_or_after_eoi_are_not_scans():
    jpeg = encoded("JPEG")
    payload = b"Exif\0\0" + b"\xff\xda\x00\x02" * 200  # an APP1 full of SOS-looking bytes
    app1 = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    with_app = jpeg[:2] + app1 + jpeg[2:]
    assert jpeg_scans(with_app) == 1
    assert jpeg_scans(jpeg + b"\xff\xda\x00\x02" * 500) == 1  # after the first EOI libjpeg reads nothing
    assert decode(with_app, max_pixels=1000, pixels_name="limit").size == (16, 16)


def test_the_scan_count_is_linear_on_hostile_fill_bytes():
    assert jpeg_scans(b"\xff\xd8" + b"\xff" * 2_000_000 + b"\x00") == 0
    assert jpeg_scans(b"\xff\xd8\xff\xda\x00\x02" + b"\xff\x00" * 1_000_000 + b"\xff\xd9") == 1
    assert jpeg_scans(b"\xff\xd8" + b"\xff\xda\x00\x02\x00" * 200_000) == 200_000


@pytest.fixture
def alarm():
    signal.signal(signal.SIGALRM, lambda *a: pytest.fail("reading the image blocked"))
    signal.alarm(10)
    yield
    signal.alarm(0)


def _observe(value):
    return split_images([{"role": "tool", "content": [{"type": "text", "text": "see"},
                                                      {"type": "image", "image": value}]}], "messages")


def test_a_symlink_fifo_or_plain_path_in_an_observation_part_is_refused_unopened(tmp_path, alarm, monkeypatch):
    png = tmp_path / "a.png"
    png.write_bytes(encoded("PNG"))
    link = tmp_path / "link.png"
    link.symlink_to(png)
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)  # opening it would block until a writer came
    opened = []
    monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a) or 1 / 0)
    for value in (str(link), str(fifo), str(png), png, "/etc/passwd"):
        with pytest.raises(ImageContentError, match=r"messages\[0\].content\[1\].image: .* is a local path"):
            _observe(value)
    assert opened == []


def test_a_gateway_agent_cannot_make_the_trainer_read_a_local_image(tmp_path):
    png = tmp_path / "secret.png"
    png.write_bytes(encoded("PNG"))
    with pytest.raises(RequestError, match="is a local path") as err:
        gateway({"type": "image", "image": str(png)})
    assert err.value.status == 400 and "messages[0].content[0].image" in str(err.value)


def test_an_observations_image_itself_is_still_read():
    _, images = _observe(Image.new("RGB", (4, 4), (1, 2, 3)))
    _, more = _observe(encoded("PNG"))
    assert images[0].getpixel((0, 0)) == (1, 2, 3) and more[0].size == (16, 16)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF", "PPM"])
@pytest.mark.parametrize("read", [_row, _observation])
def test_every_format_in_the_list_is_read_on_every_path(read, fmt):
    """Naming ``MPO`` among Pillow's openers made it raise ``KeyError`` for GIF, BMP, WEBP, TIFF and PPM rows."""
    data = encoded(fmt)
    assert read(data).size == (16, 16) and read(url(data, media_type(data))).size == (16, 16)


def test_a_fifo_named_by_a_data_row_is_refused_without_blocking(tmp_path, alarm):
    os.mkfifo(tmp_path / "pipe.png")
    with pytest.raises(DataError, match="not a regular file"):
        data_images.load_image("pipe.png", folder=str(tmp_path), where="row 1")


def test_an_openenv_image_field_goes_through_the_same_rules(no_ghostscript):
    from steadyrl.envs.openenv import observation_content

    for image, said in ((url(EPS), "not a readable image in one of the formats"),
                        (url(encoded("JPEG"), "image/png"), "declares image/png but its bytes are a JPEG"),
                        (url(scan_bomb(), "image/jpeg"), "1010 scans"),
                        ("/etc/passwd", "expected a data:image")):
        content = observation_content({"text": "look", "pixels": image}, "text", "pixels")
        with pytest.raises(ImageContentError, match=said):
            split_images([{"role": "user", "content": content}])
    assert no_ghostscript == []


def test_an_in_memory_image_is_copied_not_shared():
    drawn = Image.new("RGB", (4, 4), (1, 2, 3))
    _, images = _observe(drawn)
    drawn.putpixel((0, 0), (9, 9, 9))  # the environment draws on after returning it
    assert images[0].getpixel((0, 0)) == (1, 2, 3)


def restart_bomb(size: int = 64, hidden: int = 1_000) -> bytes:
    """A progressive JPEG with a restart every MCU whose extra scans sit behind a reserved marker
    (``FF 02``) that looks like a segment: a length-skipping count passes over them, but libjpeg,
    at the restart due after the scan's first MCU, discards ``FF 02`` (``jpeg_resync_to_restart``)
    and scans on to the next marker, the first hidden SOS, and so decodes every one of them."""
    out = io.BytesIO()
    Image.new("RGB", (size, size), (200, 40, 90)).save(out, format="JPEG", progressive=True, restart_marker_blocks=1)
    data = out.getvalue()
    last, end = data.rindex(b"\xff\xda"), data.rindex(b"\xff\xd9")
    sos = data[last:last + 2 + struct.unpack(">H", data[last + 2:last + 4])[0]]  # the last scan's header
    payload = (sos * hidden).ljust(0xFEFE - 2, b"\0")
    assert len(payload) == 0xFEFE - 2
    return data[:end] + sos + b"\xff\x02\xfe\xfe" + payload + data[end:]


def test_scans_hidden_behind_a_reserved_marker_at_a_restart_are_counted(monkeypatch):
    bomb = restart_bomb()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Image.open(io.BytesIO(bomb)).load()  # libjpeg decodes it: every hidden scan is one more pass
    assert jpeg_scans(bomb) > 1_000
    decoded = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self) or None)
    for read in PATHS:
        with pytest.raises(REFUSED, match=f"scans, more than {MAX_JPEG_SCANS}"):
            read(url(bomb, "image/jpeg"))
    assert decoded == []


def gif_with_comments(extensions: int, blocks: int = 1) -> bytes:
    """A 4 x 4 GIF whose first frame follows ``extensions`` comment extensions of ``blocks`` sub-blocks
    each: Pillow's opener joins them by ``bytes +=`` (a copy of all so far, per sub-block and per
    extension), quadratic in their number: 400,000 one-byte comments (2 MB) took 14 s to open."""
    gif = encoded("GIF", (4, 4))
    start = 13 + (3 << ((gif[10] & 7) + 1) if gif[10] & 0x80 else 0)  # after the global colour table
    comment = b"!\xfe" + b"\x01c" * blocks + b"\x00"
    return gif[:start] + comment * extensions + gif[start:]


@pytest.mark.parametrize("extensions, blocks", [(20_000, 1), (1, 20_000)])
def test_a_gif_of_many_comments_is_refused_before_pillow_reads_them(monkeypatch, extensions, blocks):
    from PIL import GifImagePlugin

    bomb = gif_with_comments(extensions, blocks)
    opened = []
    monkeypatch.setattr(GifImagePlugin.GifImageFile, "_open", lambda self: opened.append(self) or 1 / 0)
    for read in PATHS:
        with pytest.raises(REFUSED, match="comment sub-blocks before its first frame"):
            read(url(bomb, "image/gif"))
    assert opened == []


def test_a_gif_with_a_few_comments_is_read():
    assert decode(gif_with_comments(8, 4), max_pixels=100, pixels_name="limit").size == (4, 4)
    assert decode(encoded("GIF", (8, 8), comment=b"hello" * 300), max_pixels=100, pixels_name="limit").size == (8, 8)


def tiff_of(entries, payload: bytes) -> bytes:
    """A little-endian TIFF of one directory of ``(tag, type, value)`` entries, as listed (a tag may be
    repeated), count 1 each (type 3 SHORT, 4 LONG); a value of None is the payload's offset."""
    ifd = 2 + 12 * len(entries) + 4
    body = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<HHI", tag, kind, 1) + (struct.pack("<HH", 8 + ifd if value is None else value, 0) if kind == 3
                                             else struct.pack("<I", 8 + ifd if value is None else value))
        for tag, kind, value in entries)
    return b"II*\x00" + struct.pack("<I", 8) + body + struct.pack("<I", 0) + payload


def tiled(width: int, height: int, tile_widths, tile_length: int, data: bytes) -> bytes:
    """A grey deflate TIFF of one tile (``tile_widths``: the TileWidth entries, in order) holding ``data``."""
    return tiff_of([(256, 3, width), (257, 3, height), (258, 3, 8), (259, 3, 8), (262, 3, 1)]
                   + [(322, 3, w) for w in tile_widths] + [(323, 3, tile_length), (324, 4, None),
                                                           (325, 4, len(data))], data)


def test_a_tiff_whose_tiles_are_far_larger_than_it_is_refused():
    """libtiff decodes whole tiles: a 1 x 1 image in one 4096 x 4096 tile (16 KB of deflate) is 16.7
    Mpix of decoding (and a 2 GiB tile decoded in ~25 s from 2 MB) that the pixel limit never saw."""
    bomb = tiled(1, 1, [4096], 4096, zlib.compress(bytes(4096 * 4096), 9))
    assert len(bomb) < 20_000
    image = Image.open(io.BytesIO(bomb))
    assert image.size == (1, 1)
    image.load()  # libtiff decodes it
    for read in PATHS:
        with pytest.raises(REFUSED, match="in tiles of 4096 x 4096: libtiff decodes whole tiles, 16777216 pixels"):
            read(url(bomb, "image/tiff"))
    fine = tiled(10, 10, [16], 16, zlib.compress(bytes(16 * 16), 9))  # a tile past the edges, within the limit
    assert decode(fine, max_pixels=1024, pixels_name="limit").size == (10, 10)


def test_a_bigtiff_directory_of_repeated_entries_is_refused_before_pillow_reads_it(monkeypatch):
    """A BigTIFF directory may list (bytes / 20) entries, each read by Pillow in Python: 210,000 in
    4 MiB took 2 s to open. Past 65,536 a tag repeats: refused at the first repeat, before opening."""
    from PIL import TiffImagePlugin

    entries = [(65000, 1, 1, 0)] * 2000 + [(256, 3, 1, 1), (257, 3, 1, 1), (258, 3, 1, 8)]
    body = struct.pack("<Q", len(entries)) + b"".join(struct.pack("<HHQQ", *e) for e in entries) + struct.pack("<Q", 0)
    bomb = b"II+\x00" + struct.pack("<HHQ", 8, 0, 16) + body
    opened = []
    monkeypatch.setattr(TiffImagePlugin.TiffImageFile, "_open", lambda self: opened.append(self) or 1 / 0)
    for read in [_row, _observation]:
        with pytest.raises(REFUSED, match="lists tag 65000 twice"):
            read(bomb)
    assert opened == []


def test_a_tiff_that_repeats_a_tag_is_refused():
    """Pillow keeps a repeated tag's last value, libtiff (which decodes) its first: tiles of 16 for the
    checks, of 4096 for the decoder."""
    bomb = tiled(1, 1, [4096, 16], 4096, zlib.compress(bytes(4096 * 4096), 9))
    assert Image.open(io.BytesIO(bomb)).tag_v2[322] == 16
    with pytest.raises(ImageRefused, match="lists tag 322 twice: Pillow reads the last and libtiff"):
        decode(bomb, max_pixels=12_845_056, pixels_name="limit")


def test_a_jpeg_tiffs_last_strip_taller_than_the_image_is_refused():
    """libtiff accepts a last strip whose JPEG is taller than the strip, and libjpeg decodes all of a
    progressive one: a 1024 x 1 TIFF holding a 1024 x 16384 JPEG was 16.8 Mpix of decoding."""
    bomb = jpeg_tiff(encoded("JPEG", (256, 4096), progressive=True), 256)
    bomb = bomb.replace(struct.pack("<HHIHH", 257, 3, 1, 256, 0), struct.pack("<HHIHH", 257, 3, 1, 1, 0))
    bomb = bomb.replace(struct.pack("<HHIHH", 278, 3, 1, 256, 0), struct.pack("<HHIHH", 278, 3, 1, 1, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        image = Image.open(io.BytesIO(bomb))
        assert image.size == (256, 1)
        image.load()  # libtiff decodes it
    with pytest.raises(ImageRefused, match="holds a JPEG of 1048576 pixels, more than the strip's or tile's 256"):
        decode(bomb, max_pixels=12_845_056, pixels_name="limit")


def rle_bmp(side: int, row: bytes) -> bytes:
    """An 8-bit RLE BMP (Compression 1), ``side`` x ``side``, each row's commands ``row``."""
    rle = row * side + b"\x00\x01"
    palette = bytes(4 * 256)
    header = struct.pack("<IiiHHIIiiII", 40, side, side, 1, 8, 1, len(rle), 0, 0, 256, 0)
    offset = 14 + 40 + len(palette)
    return b"BM" + struct.pack("<IHHI", offset + len(rle), 0, 0, offset) + header + palette + rle


@pytest.mark.parametrize("bomb", [
    rle_bmp(3584, b"\x01\x05\x00\x00"),  # one pixel, then end of line: Pillow pads the row a byte at a time
    b"P6 1024 1024 254\n" + bytes(3 * 1024 * 1024),  # maxval 254: every sample scaled in Python
    b"P3 600 600 255\n" + b"1 2 3\n" * 360_000,  # plain text: every number parsed in Python
], ids=["rle-bmp", "ppm-maxval", "plain-ppm"])
def test_an_image_pillow_decodes_in_python_is_held_to_fewer_pixels(bomb, monkeypatch):
    """Pillow decodes these in Python, 0.3 to 5 us a pixel: the 15 KB BMP took 3.5 s, the 3 MB PPM 4.8 s."""
    decoded = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self) or None)
    for read in PATHS:
        with pytest.raises(REFUSED, match=f"that Pillow decodes in Python .*more than {MAX_PYTHON_DECODED_PIXELS}"):
            read(url(bomb, media_type(bomb)))
    assert decoded == []


def test_small_images_pillow_decodes_in_python_are_read():
    for data in (rle_bmp(64, b"\x40\x05\x00\x00"), b"P6 8 8 254\n" + bytes(3 * 64), b"P2 4 4 9\n" + b"1 " * 16):
        assert decode(data, max_pixels=10_000, pixels_name="limit").size in ((64, 64), (8, 8), (4, 4))


def _after_app0(jpeg: bytes, inserted: bytes) -> bytes:
    at = 4 + struct.unpack(">H", jpeg[4:6])[0]  # SOI, then APP0 (JFIF) and its length
    return jpeg[:at] + inserted + jpeg[at:]


@pytest.mark.parametrize("flood", [b"\xff\xfe\x00\x02" * 2 ** 18, b"\xff" * 2 ** 20, b"\0" * 2 ** 20],
                         ids=["empty-COM-segments", "fill-bytes", "junk"])
def test_a_jpeg_header_flood_is_refused_before_pillow_parses_it(flood, monkeypatch):
    """Pillow's JPEG header parser reads every segment, and every fill or junk byte, in Python: 4 MiB of
    empty COM segments took 6 s (the scan count 3.4 s of it), of fill bytes 4 s, before decoding."""
    from PIL import JpegImagePlugin

    bomb = _after_app0(encoded("JPEG"), flood)
    opened = []
    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "_open", lambda self: opened.append(self) or 1 / 0)
    for read in PATHS:
        with pytest.raises(REFUSED, match=f"more than {MAX_JPEG_SEGMENTS} segments or 65536 bytes outside them"):
            read(url(bomb, "image/jpeg"))
    assert opened == []


def test_restart_markers_in_a_scan_cost_the_count_no_python(monkeypatch):
    """RSTn markers (two bytes each) are passed over by the marker search itself: 2 million of them took
    the count 2 s, libjpeg 0.02 s."""
    jpeg = encoded("JPEG")
    flood = jpeg[:-2] + b"\xff\xd0" * 2 ** 21 + jpeg[-2:]
    walked = []
    real = image_decode._FILL  # the fill bytes where a marker is due: matched once a marker the search returned
    monkeypatch.setattr(image_decode, "_FILL", type("Fill", (), {
        "match": lambda self, *a: walked.append(a) or real.match(*a)})())
    assert jpeg_scans(flood) == 1 and len(walked) < 100
    assert decode(_after_app0(jpeg, b"\xff\xfe\x00\x02" * 64), max_pixels=1000, pixels_name="limit").size == (16, 16)


def _chunk_offsets(png: bytes):
    pos = 8
    while pos < len(png):
        yield pos
        pos += 12 + struct.unpack(">I", png[pos:pos + 4])[0]


def png_chunk(kind: bytes, data: bytes = b"") -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@pytest.mark.parametrize("where", ["before IDAT", "IDAT", "after IDAT"])
def test_a_png_of_many_small_chunks_is_refused_before_pillow_reads_them(where, monkeypatch):
    """Pillow reads every chunk up to the first frame's pixels, and for a still PNG every one after
    them, in Python: 4 MiB of empty ancillary chunks took 3.6 s to open, of empty IDATs 1.1 s."""
    from PIL import PngImagePlugin

    png = encoded("PNG", (4, 4))
    idat = png.index(b"IDAT") - 4
    flood = png_chunk(b"IDAT" if where == "IDAT" else b"abCd") * 50_000
    at = {"before IDAT": idat, "IDAT": idat, "after IDAT": png.index(b"IEND") - 4}[where]
    bomb = png[:at] + flood + png[at:]
    opened = []
    monkeypatch.setattr(PngImagePlugin.PngImageFile, "_open", lambda self: opened.append(self) or 1 / 0)
    for read in PATHS:
        with pytest.raises(REFUSED, match=r"a PNG of more than \d+ chunks \(4096 and one per 4 KiB\)"):
            read(url(bomb, "image/png"))
    assert opened == []


def test_pngs_of_many_large_chunks_or_an_animations_frames_are_read():
    big = io.BytesIO()
    Image.effect_noise((1184, 1184), 60).convert("RGB").save(big, format="PNG", compress_level=0)
    png = big.getvalue()
    idat, end = png.index(b"IDAT") - 4, png.index(b"IEND") - 4
    pixels = b"".join(png[i + 8:i + 8 + struct.unpack(">I", png[i:i + 4])[0]]  # every IDAT's data, in order
                      for i in _chunk_offsets(png) if png[i + 4:i + 8] == b"IDAT")
    rechunked = png[:idat] + b"".join(png_chunk(b"IDAT", pixels[i:i + 1024]) for i in range(0, len(pixels), 1024))
    rechunked += png[end:]  # 1 KiB IDATs, as some encoders write: more than 4096 chunks, fewer than one per KiB
    assert png_chunks(rechunked, 10 ** 6) > 4096
    assert decode(rechunked, max_pixels=2 * 10 ** 6, pixels_name="limit").size == (1184, 1184)
    frames = [Image.new("RGB", (2, 2), (i % 256, 0, 0)) for i in range(3000)]
    apng = io.BytesIO()
    frames[0].save(apng, format="PNG", save_all=True, append_images=frames[1:])
    assert png_chunks(apng.getvalue(), 10 ** 6) < 10  # the first frame: nothing after it is read
    assert decode(apng.getvalue(), max_pixels=100, pixels_name="limit").size == (2, 2)


def test_a_gif_of_many_extension_sub_blocks_is_refused_before_pillow_reads_them(monkeypatch):
    """Pillow reads every sub-block of every extension before the first frame in Python: 4 MiB of
    one-byte sub-blocks in an application extension took 1.9 s to open."""
    from PIL import GifImagePlugin

    gif = encoded("GIF", (4, 4))
    start = 13 + (3 << ((gif[10] & 7) + 1) if gif[10] & 0x80 else 0)
    bomb = gif[:start] + b"!\xff\x0bNETSCAPE2.0" + b"\x01x" * 20_000 + b"\x00" + gif[start:]
    looping = io.BytesIO()  # an animation's own extensions (loop, frame control) are a few sub-blocks
    Image.new("P", (4, 4)).save(looping, format="GIF", save_all=True, append_images=[Image.new("P", (4, 4), 1)], loop=0)
    assert decode(looping.getvalue(), max_pixels=100, pixels_name="limit").size == (4, 4)
    opened = []
    monkeypatch.setattr(GifImagePlugin.GifImageFile, "_open", lambda self: opened.append(self) or 1 / 0)
    for read in PATHS:
        with pytest.raises(REFUSED, match=r"a GIF of more than \d+ extension sub-blocks before its first frame"):
            read(url(bomb, "image/gif"))
    assert opened == []
