"""The build step with a vision-language model: its processor loaded at start-up and carried by
Prompts, image paths resolved against the data file's folder, and every mismatch (images for a
text model, a VLM without a processor, a critic on a VLM, a bad image) said before any weights load."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch
import yaml
from PIL import Image

from steadyrl.assembly import setup
from steadyrl.config import load_config
from steadyrl.demo.vision_model import build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.errors import ConfigError, DataError, ModelLoadError

ALPHABET = "abcdefghijklmnopqrstuvwxyz ?0123456789"


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    tok = build_vision_tokenizer(ALPHABET, "qwen2_vl")
    model, processor = build_tiny_qwen2_vl(tok)
    path = tmp_path_factory.mktemp("vlm")
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def write_data(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pics").mkdir(exist_ok=True)
    for name, color in (("red.png", (255, 0, 0)), ("blue.png", (0, 0, 255))):
        Image.new("RGB", (28, 28), color).save(folder / "pics" / name)
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "train.jsonl"


def config_for(tmp_path, model, data, **data_keys):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "model": {"name_or_path": str(model)}, "data": {"train_path": str(data), **data_keys},
        "rollout": {"max_new_tokens": 8}, "trainer": {"device": "cpu"}}))
    return load_config(str(tmp_path / "config.yaml"), [])


ROWS = [{"prompt": "what colour", "images": ["pics/red.png"], "answer": "red"},
        {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "colour?"}]}],
         "images": ["pics/blue.png"], "answer": "blue"},
        {"prompt": "no image here", "images": [], "answer": "x"}]


def test_a_vlm_run_loads_its_processor_and_the_rows_images(tmp_path, vlm_dir):
    config = config_for(tmp_path, vlm_dir, write_data(tmp_path / "data", ROWS))
    with contextlib.ExitStack() as resources:
        prompts = setup.check_inputs(config, resources).prompts
    assert prompts.processor is not None and prompts.processor.image_processor is not None
    items = prompts.train_prompts
    assert [len(i.images) for i in items] == [1, 1, 0]
    assert items[0].images[0].getpixel((0, 0)) == (255, 0, 0)
    assert items[0].image_inputs["pixel_values"].shape == (4, 1176) and items[2].image_inputs is None
    assert items[0].columns["answer"] == "red"


def test_bad_images_skip_reports_once_and_keeps_the_good_rows(tmp_path, vlm_dir, capsys):
    rows = ROWS + [{"prompt": "gone", "images": ["pics/missing.png"], "answer": "?"}]
    config = config_for(tmp_path, vlm_dir, write_data(tmp_path / "data", rows), bad_images="skip")
    with contextlib.ExitStack() as resources:
        prompts = setup.check_inputs(config, resources).prompts
    assert len(prompts.train_prompts) == 3 and prompts.skipped_images == 1
    out = capsys.readouterr().out
    assert out.count("skipped 1 row(s) with a bad image") == 1 and "missing.png" in out


def test_a_missing_image_is_an_error_at_start_up_by_default(tmp_path, vlm_dir):
    rows = ROWS + [{"prompt": "gone", "images": ["pics/missing.png"], "answer": "?"}]
    config = config_for(tmp_path, vlm_dir, write_data(tmp_path / "data", rows))
    with pytest.raises(DataError, match=r"data.train_path row 4, column 'images'.*no such file"):
        with contextlib.ExitStack() as resources:
            setup.check_inputs(config, resources)


def test_images_for_a_text_model_name_the_model_and_the_column(tmp_path):
    import support

    model = support.build_tiny_lm(tmp_path / "text_model")
    config = config_for(tmp_path, model, write_data(tmp_path / "data", ROWS))
    with pytest.raises(ConfigError, match=r"data.train_path row 1 has images \(data.image_column = 'images'\).*model.name_or_path = .*text-only"):
        with contextlib.ExitStack() as resources:
            setup.check_inputs(config, resources)


def test_a_text_models_data_may_have_a_text_column_named_image(tmp_path):
    """Found by its name alone (data.image_column null), a column of text is no image column."""
    import support

    model = support.build_tiny_lm(tmp_path / "text_model")
    rows = [{"prompt": "abc", "answer": "1", "image": "a cat on a mat"}]
    config = config_for(tmp_path, model, write_data(tmp_path / "data", rows))
    with contextlib.ExitStack() as resources:
        prompts = setup.check_inputs(config, resources).prompts
    assert prompts.train_prompts[0].columns["image"] == "a cat on a mat"


def test_a_text_model_without_images_keeps_prompts_exactly(tmp_path):
    import support

    model = support.build_tiny_lm(tmp_path / "text_model")
    config = config_for(tmp_path, model, write_data(tmp_path / "data", [{"prompt": "abc", "answer": "1"}]))
    with contextlib.ExitStack() as resources:
        prompts = setup.check_inputs(config, resources).prompts
    assert prompts.processor is None and prompts.train_prompts[0].image_inputs is None


def test_a_vlm_whose_processor_cannot_load_is_a_model_load_error_naming_the_field(tmp_path, vlm_dir):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(vlm_dir, broken)
    for name in ("preprocessor_config.json", "processor_config.json"):  # where the image processor is saved
        (broken / name).unlink(missing_ok=True)
    config = config_for(tmp_path, broken, write_data(tmp_path / "data", ROWS))
    with pytest.raises(ModelLoadError, match=r"model.name_or_path = .*processor .*could not be loaded"):
        with contextlib.ExitStack() as resources:
            setup.check_inputs(config, resources)


def test_a_critic_on_a_vlm_is_refused_at_start_up(tmp_path, vlm_dir):
    config = config_for(tmp_path, vlm_dir, write_data(tmp_path / "data", ROWS))
    config = config.model_copy(update={"algorithm": config.algorithm.model_copy(
        update={"advantage_estimator": "gae"})})
    with pytest.raises(ConfigError, match="text-only hidden states"):
        with contextlib.ExitStack() as resources:
            setup.check_inputs(config, resources)


def test_build_models_freezes_the_vision_tower_by_default(tmp_path, vlm_dir):
    import torch

    config = config_for(tmp_path, vlm_dir, write_data(tmp_path / "data", ROWS))
    policy, reference, _, _ = setup.build_models(config, str(vlm_dir), torch.device("cpu"))
    assert not any(p.requires_grad for p in policy.model.visual.parameters())
    assert all(p.requires_grad for p in policy.model.language_model.parameters())
    unfrozen = config_for(tmp_path, vlm_dir, tmp_path / "data" / "train.jsonl")
    unfrozen.model.freeze_vision = False
    policy, _, _, _ = setup.build_models(unfrozen, str(vlm_dir), torch.device("cpu"))
    assert all(p.requires_grad for p in policy.model.visual.parameters())


def test_prompts_hold_no_pixels_and_a_step_reads_its_images_again(tmp_path, vlm_dir):
    """Start-up checks every image but keeps none: the lazy inputs equal the processor's output,
    and only the prompts a step reads are processed (counted), with the recent ones cached."""
    from PIL import Image

    from steadyrl.data import lazy_images
    from steadyrl.data.lazy_images import LazyImageInputs, LazyImages
    from steadyrl.vlm import load_processor

    config = config_for(tmp_path, vlm_dir, write_data(tmp_path / "data", ROWS))
    with contextlib.ExitStack() as resources:
        prompts = setup.check_inputs(config, resources).prompts
    item = prompts.train_prompts[0]
    assert isinstance(item.image_inputs, LazyImageInputs) and isinstance(item.images, LazyImages)
    assert sorted(item.image_inputs) == ["image_grid_thw", "pixel_values"] and len(item.images) == 1
    lazy_images._recent.clear()
    before = lazy_images.loaded_count()
    pixels = item.image_inputs["pixel_values"]
    assert item.image_inputs["image_grid_thw"].tolist() == [[1, 2, 2]]
    assert lazy_images.loaded_count() == before + 1  # the second key came from the cache
    processor = load_processor(str(vlm_dir))
    with Image.open(tmp_path / "data" / ROWS[0]["images"][0]) as image:
        expected = processor(text=[item.text], images=[[image.convert("RGB")]], return_tensors="pt",
                             add_special_tokens=False)
    assert torch.equal(pixels, expected["pixel_values"])
    lazy_images._recent.clear()  # dropped from the cache: read and processed again, the same tensors
    assert torch.equal(item.image_inputs["pixel_values"], pixels)
    assert lazy_images.loaded_count() == before + 2
