"""steadyrl.data.images: every form of an image value, and every bad image refused with a clear
error before a pixel of it is decoded (or the row skipped and counted)."""

import base64
import io
import os
import struct
import zlib

import pytest
from PIL import Image

from steadyrl.data.images import (
    ImageOptions,
    byte_limit,
    image_column_of,
    looks_like_image,
    load_image,
    load_images,
    prompt_with_images,
)
from steadyrl.errors import DataError


def png_bytes(size=(6, 4), color=(10, 200, 30), mode="RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, color if mode == "RGB" else 7).save(buf, format="PNG")
    return buf.getvalue()


def bomb_png(width=100_000, height=100_000) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels, with almost no data: a few hundred bytes."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def test_every_form_of_an_image_value_loads_as_the_same_rgb_image(tmp_path):
    data = png_bytes()
    (tmp_path / "a.png").write_bytes(data)
    pil = Image.open(io.BytesIO(data))
    forms = [str(tmp_path / "a.png"), "a.png", data, bytearray(data), pil, {"bytes": data, "path": None},
             {"bytes": None, "path": "a.png"}, data_url(data), tmp_path / "a.png"]
    for value in forms:
        image = load_image(value, folder=str(tmp_path))
        assert image.mode == "RGB" and image.size == (6, 4)
        assert image.getpixel((0, 0)) == (10, 200, 30), value


def test_a_grey_or_palette_image_is_converted_to_rgb():
    assert load_image(png_bytes(mode="L")).mode == "RGB"
    assert load_image(png_bytes(mode="P")).mode == "RGB"


def test_a_list_value_loads_each_image_and_none_is_no_image(tmp_path):
    options = ImageOptions(column="images", folder=str(tmp_path))
    assert load_images(None, options, "row 1") == []
    assert len(load_images([png_bytes(), png_bytes((3, 3))], options, "row 1")) == 2


def test_a_decompression_bomb_is_refused_from_its_header_before_decoding():
    bomb = bomb_png()
    assert len(bomb) < 200  # it costs nothing to make: the refusal must cost nothing too
    with pytest.raises(DataError, match=r"decompression bomb.*data.max_image_pixels.*10000000000 pixels") as err:
        load_image(bomb, where="data.train_path row 3, column 'images'")
    assert "row 3" in str(err.value) and "'images'" in str(err.value)


def test_an_image_over_the_limit_is_refused_from_its_header_not_decoded(monkeypatch):
    decoded = []
    from PIL import ImageFile

    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self) or None)
    with pytest.raises(DataError, match="5000 x 4000 = 20000000 pixels, more than data.max_image_pixels = 1000000"):
        load_image(bomb_png(5000, 4000), max_pixels=1_000_000)
    assert decoded == []


def test_the_pixel_limit_is_the_configured_one():
    with pytest.raises(DataError, match="6 x 4 = 24 pixels, more than data.max_image_pixels = 23"):
        load_image(png_bytes(), max_pixels=23)
    assert load_image(png_bytes(), max_pixels=24).size == (6, 4)


def test_a_pil_image_over_the_limit_is_refused():
    with pytest.raises(DataError, match="max_image_pixels"):
        load_image(Image.new("RGB", (10, 10)), max_pixels=99)


def test_a_truncated_file_is_a_clear_error_naming_the_row_and_value(tmp_path):
    (tmp_path / "cut.png").write_bytes(png_bytes((64, 64))[:60])
    with pytest.raises(DataError) as err:
        load_image("cut.png", folder=str(tmp_path), where="data.train_path row 7, column 'images'")
    text = str(err.value)
    assert "row 7" in text and "'images'" in text and "'cut.png'" in text and "not a readable image" in text
    assert "Valid:" in text


def test_bytes_that_are_no_image_are_refused():
    with pytest.raises(DataError, match="not a readable image"):
        load_image(b"hello, not a png")


def test_a_missing_path_names_the_file_it_looked_for(tmp_path):
    with pytest.raises(DataError, match="no such file") as err:
        load_image("nope.png", folder=str(tmp_path))
    assert str(tmp_path / "nope.png") in str(err.value)


def test_a_symbolic_link_is_never_followed(tmp_path):
    secret = tmp_path / "outside.png"
    secret.write_bytes(png_bytes())
    data = tmp_path / "data"
    data.mkdir()
    os.symlink(secret, data / "link.png")
    with pytest.raises(DataError, match="symbolic link"):
        load_image("link.png", folder=str(data))
    with pytest.raises(DataError, match="symbolic link"):
        load_image(str(data / "link.png"))


def test_a_linked_folder_inside_a_relative_path_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.png").write_bytes(png_bytes())
    data = tmp_path / "data"
    data.mkdir()
    os.symlink(outside, data / "imgs")
    with pytest.raises(DataError, match="symbolic link"):
        load_image("imgs/a.png", folder=str(data))


def test_http_urls_are_refused_no_network():
    for url in ("http://example.com/a.png", "https://example.com/a.png"):
        with pytest.raises(DataError, match="no images from the network"):
            load_image(url)


def test_a_data_url_over_the_size_limit_is_refused_before_decoding():
    limit = byte_limit(24)
    huge = "data:image/png;base64," + "A" * (limit * 4 // 3 + 100)
    with pytest.raises(DataError, match="data URL holds more than"):
        load_image(huge, max_pixels=24)


def test_a_malformed_data_url_is_refused():
    with pytest.raises(DataError, match="not valid base64"):
        load_image("data:image/png;base64,***")
    with pytest.raises(DataError, match="data:image/<type>;base64"):
        load_image("data:text/plain,hello")


def test_too_many_images_per_prompt_is_refused():
    options = ImageOptions(column="images", max_per_prompt=2)
    with pytest.raises(DataError, match="3 images, more than data.max_images_per_prompt = 2"):
        load_images([png_bytes()] * 3, options, "row 1")


def test_a_value_of_another_type_is_refused_naming_it():
    with pytest.raises(DataError, match="a int is not an image"):
        load_image(5)


def test_the_image_column_is_found_or_named_when_absent():
    assert image_column_of([{"prompt": "p", "images": []}], None) == "images"
    assert image_column_of([{"prompt": "p", "image": None}], None) == "image"
    assert image_column_of([{"prompt": "p"}], None) is None
    with pytest.raises(DataError, match="data.image_column = 'pics': no row has that column"):
        image_column_of([{"prompt": "p"}], "pics")


def test_bare_image_parts_take_the_column_images_in_order():
    red, blue = png_bytes(color=(255, 0, 0)), png_bytes(color=(0, 0, 255))
    record = {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"},
                                                      {"type": "image"}]}], "images": [red, blue]}
    prompt, images = prompt_with_images(record, ImageOptions(column="images"), "row 1")
    assert [im.getpixel((0, 0)) for im in images] == [(255, 0, 0), (0, 0, 255)]
    assert prompt[0]["content"][0] == {"type": "image"} and prompt[0]["content"][2] == {"type": "image"}


def test_parts_carrying_their_own_image_use_it_and_are_made_bare():
    green = png_bytes(color=(0, 255, 0))
    record = {"prompt": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(green)}},
        {"type": "image", "image": green},
        {"type": "text", "text": "what?"}]}]}
    prompt, images = prompt_with_images(record, ImageOptions(column=None), "row 1")
    assert len(images) == 2 and all(im.getpixel((0, 0)) == (0, 255, 0) for im in images)
    assert prompt[0]["content"][:2] == [{"type": "image"}, {"type": "image"}]  # no payload left in the messages


def test_image_parts_and_column_images_must_be_as_many():
    record = {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}],
              "images": [png_bytes(), png_bytes()]}
    with pytest.raises(DataError, match="1 image part.*column 'images' holds 2 image"):
        prompt_with_images(record, ImageOptions(column="images"), "row 1")


def test_a_string_prompt_with_images_becomes_a_user_message_images_first():
    prompt, images = prompt_with_images({"prompt": "count", "images": [png_bytes()]},
                                        ImageOptions(column="images"), "row 1")
    assert prompt == [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "count"}]}]
    assert len(images) == 1


def test_a_row_without_images_is_left_exactly_as_it_is():
    record = {"prompt": [{"role": "user", "content": "hi"}], "images": None}
    prompt, images = prompt_with_images(record, ImageOptions(column="images"), "row 1")
    assert prompt is record["prompt"] and images == ()


def test_a_datasets_image_column_from_save_to_disk_and_parquet_loads(tmp_path):
    datasets = pytest.importorskip("datasets")
    from steadyrl.data import load_records

    red = Image.new("RGB", (5, 5), (250, 0, 0))
    ds = datasets.Dataset.from_dict({"prompt": ["colour?"], "images": [[red]]})
    ds = ds.cast_column("images", datasets.Sequence(datasets.Image()))
    ds.save_to_disk(str(tmp_path / "saved"))
    ds.to_parquet(str(tmp_path / "rows.parquet"))
    for path in (tmp_path / "saved", tmp_path / "rows.parquet"):
        (record,) = load_records(path)
        _, images = prompt_with_images(record, ImageOptions(column="images"), "row 1")
        assert [im.getpixel((0, 0)) for im in images] == [(250, 0, 0)]


def test_only_image_like_values_look_like_images():
    assert looks_like_image(["pics/a.PNG"]) and looks_like_image(b"\x89PNG")
    assert looks_like_image({"bytes": None, "path": "x"})
    assert looks_like_image(Image.new("RGB", (1, 1))) and looks_like_image("data:image/png;base64,AAAA")
    assert not looks_like_image("a cat on a mat") and not looks_like_image(None) and not looks_like_image([])


def test_a_format_that_runs_an_outside_program_is_never_opened(monkeypatch):
    from PIL import EpsImagePlugin

    tried = []
    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", lambda self: tried.append(self))
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    with pytest.raises(DataError, match="not a readable image in one of the formats"):
        load_image(eps)
    assert tried == []  # Pillow would run Ghostscript to decode it


def test_bare_image_parts_without_an_image_column_say_so():
    record = {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]}
    with pytest.raises(DataError, match="1 image part.*the data has no image column"):
        prompt_with_images(record, ImageOptions(column=None), "row 1")


def test_thousands_of_image_parts_are_refused_before_any_is_loaded(monkeypatch):
    import steadyrl.data.images as images

    monkeypatch.setattr(images, "load_image", lambda *a, **k: pytest.fail("loaded"))
    parts = [{"type": "image", "image": "x.png"}] * 10_000
    record = {"prompt": [{"role": "user", "content": parts}]}
    with pytest.raises(DataError, match="10000 images, more than data.max_images_per_prompt = 8"):
        prompt_with_images(record, ImageOptions(column=None), "row 1")


def test_a_file_over_the_byte_limit_is_refused_unread(tmp_path):
    (tmp_path / "big.png").write_bytes(png_bytes() + b"\0" * (byte_limit(24) + 1))
    with pytest.raises(DataError, match=r"^row 1: image 'big.png': the file has \d+ bytes, more than"):
        load_image("big.png", folder=str(tmp_path), max_pixels=24, where="row 1")


def test_a_path_with_a_nul_byte_is_a_clear_error():
    with pytest.raises(DataError, match="unreadable"):
        load_image("a\0b.png")
