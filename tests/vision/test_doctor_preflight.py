"""``steadyrl doctor CONFIG`` on a vision-language model: the pre-flight samples and scores the
prompts WITH their images (as the run does), so its gap, its template round trip and its reward
check are those of the run, not of a model shown image placeholders without pixels."""

import json

import pytest
import torch
import yaml

from steadyrl.config import load_config
from steadyrl.demo.vision_model import build_tiny_llava, build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.demo.vision_task import make_vision_splits
from steadyrl.preflight.attribution import attribute
from steadyrl.preflight.gap import build_side, reward_check

torch.set_num_threads(1)

BUILDERS = {"qwen2_vl": build_tiny_qwen2_vl, "llava": build_tiny_llava}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def vlm_config(request, tmp_path_factory):
    """A saved tiny VLM, a data file of codeword prompts whose images are PNG paths, a config."""
    from steadyrl.demo.vision_task import VISION_ALPHABET

    family, folder = request.param, tmp_path_factory.mktemp(f"vlm_{request.param}")
    model, processor = BUILDERS[family](build_vision_tokenizer(VISION_ALPHABET, family))
    model.save_pretrained(folder / "model")
    processor.save_pretrained(folder / "model")
    rows = []
    for i, record in enumerate(make_vision_splits(4, 0, seed=1)[0]):
        paths = []
        for j, image in enumerate(record["images"]):
            image.save(folder / f"{i}_{j}.png")
            paths.append(f"{i}_{j}.png")
        rows.append({"prompt": record["prompt"], "images": paths, "answer": record["answer"]})
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"model": {"name_or_path": str(folder / "model")}, "data": {"train_path": str(folder / "train.jsonl")},
              "rewards": [{"name": "steadyrl.demo.vision_task:codeword_partial_reward"}],
              "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    return str(folder / "config.yaml")


def test_the_pre_flight_samples_a_vlm_with_its_images_and_is_healthy(vlm_config):
    side = build_side(load_config(vlm_config), batches=2, prompts=2)
    assert side.processor is not None
    for gen in side.gens:  # every row carries its prompt's images (before: none, the model saw no pixels)
        assert gen.image_inputs is not None and all(i is not None for i in gen.image_inputs)
    result = attribute(side, 1e-3)
    assert result.causes == [], result.causes
    assert result.round_trip is None or result.round_trip.changed == 0
    assert any("template round trip" in line and "re-encode to the sampled ids" in line for line in result.ruled_out)
    problems, lines = reward_check(side)
    assert problems == [] and lines


def test_a_bfloat16_engine_on_a_vlm_is_still_named_as_precision(vlm_config):
    side = build_side(load_config(vlm_config, ["rollout.dtype=bfloat16"]), batches=2, prompts=2)
    result = attribute(side, 1e-6)
    assert result.causes and result.causes[0].name == "precision", result.causes
