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

import pytest
from PIL import Image, ImageFile

import steadyrl.data.images as data_images
from steadyrl.agents.images import ImageContentError, decode_data_url, json_content, split_images
from steadyrl.agents.images import load_image as observation_image
from steadyrl.errors import DataError
from steadyrl.gateway.protocol import RequestError, parse_request
from steadyrl.image_decode import MAX_JPEG_SCANS, ImageRefused, decode, jpeg_scans, media_type

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
