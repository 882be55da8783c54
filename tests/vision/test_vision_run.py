"""A user's vision-language run end to end through the CLI, on both tiny families saved to a
folder: ``steadyrl train`` on a JSONL of chat prompts with image paths, then ``--resume`` one more
step from its checkpoint and ``steadyrl eval`` of its final model, which carries the processor."""

import json

import pytest
import yaml
from PIL import Image

from steadyrl import cli
from steadyrl.demo.vision_model import build_tiny_llava, build_tiny_qwen2_vl, build_vision_tokenizer

COLORS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "white": (255, 255, 255)}
BUILDERS = {"qwen2_vl": build_tiny_qwen2_vl, "llava": build_tiny_llava}


def _user_run(tmp_path, family: str):
    tok = build_vision_tokenizer("abcdefghijklmnopqrstuvwxyz ?\n", family)
    model, processor = BUILDERS[family](tok)
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    (tmp_path / "img").mkdir()
    rows = []
    for name, rgb in COLORS.items():
        Image.new("RGB", (28, 28), rgb).save(tmp_path / "img" / f"{name}.png")
        rows.append({"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "colour?"}]}],
                     "images": [f"img/{name}.png"], "answer": name})
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text(
        "def says_colour(prompts, completions, answer, **kw):\n"
        "    return [float(a[0] in c) for a, c in zip(answer, completions)]\n")
    config = {"model": {"name_or_path": str(tmp_path / "model")},
              "data": {"train_path": str(tmp_path / "train.jsonl"), "eval_path": str(tmp_path / "train.jsonl")},
              "rewards": [{"name": f"{tmp_path / 'rewards.py'}:says_colour"}],
              "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4},
              "trainer": {"device": "cpu", "max_steps": 2, "save_every": 1}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "config.yaml"


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_a_vision_language_run_trains_resumes_and_evaluates_from_the_cli(tmp_path, family):
    config = _user_run(tmp_path, family)
    out = tmp_path / "run"
    assert cli.main(["train", str(config), "--output-dir", str(out)]) == 0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in steps if "rollout/images_per_step" in m]
    assert [m["rollout/images_per_step"] for m in trained] == [8.0, 8.0]  # 2 prompts x 4 samples, 1 image each
    tokens = {"qwen2_vl": 1.0, "llava": 4.0}[family]
    assert all(m["rollout/image_tokens_per_sample"] == tokens for m in trained)
    assert (out / "final" / "processor_config.json").exists() or (out / "final" / "preprocessor_config.json").exists()
    assert cli.main(["train", str(config), "--output-dir", str(out), "--resume", "trainer.max_steps=3"]) == 0
    resumed = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["rollout/images_per_step"] for m in resumed if "rollout/images_per_step" in m] == [8.0] * 3
    assert cli.main(["eval", str(config), "--model", str(out / "final")]) == 0


PICTURE_ENV = '''
from PIL import Image


class PictureEnv:
    def reset(self, **row):
        return None

    def step(self, text):
        return Image.new("RGB", (28, 28), (0, 255, 0)), 0.0, False
'''


def test_a_vision_runs_episode_driver_and_its_eval_driver_carry_the_processor(tmp_path):
    """Observation images need the policy's processor where the episodes run: the run's driver
    (RunTask.driver) and ``steadyrl eval``'s are both built with it."""
    from contextlib import ExitStack

    from steadyrl.assembly.setup import build_eval, build_run
    from steadyrl.config import load_config

    config = _user_run(tmp_path, "qwen2_vl")
    (tmp_path / "picture_env.py").write_text(PICTURE_ENV)
    overrides = [f"rollout.multi_turn.environment={tmp_path / 'picture_env.py'}:PictureEnv", "rollout.multi_turn.max_turns=2",
                 "rollout.multi_turn.max_episode_tokens=64", "data.max_prompt_tokens=64", "rewards=[]"]
    run = build_run(load_config(str(config), overrides), tmp_path / "run")
    try:
        assert run.task.driver.processor is run.models.processor is not None
    finally:
        run.task.agent.shutdown()
    with ExitStack() as resources:
        *_, driver = build_eval(load_config(str(config), overrides), str(tmp_path / "model"), resources)
        assert type(driver.processor).__name__ == "ImageOnlyQwen2VLProcessor"
