"""The image demo (demo.task=vision): its records and squares, its reward, the decoy warm start
that teaches the format and not the table, and the demo's config and saved model."""

import types

import pytest
import torch

from steadyrl.demo.vision_task import (
    CODE,
    IMAGE_SIZE,
    JITTER,
    LETTERS,
    QUESTION,
    codeword_partial_reward,
    codeword_reward,
    letters_right,
    make_vision_splits,
    square,
)
from steadyrl.demo.vision_warmstart import (
    build_vision_demo,
    collate_rows,
    decoy,
    encode_vision_rows,
    format_answers,
    greedy_accuracy,
)
from steadyrl.demo.warmstart import IGNORE_INDEX


@pytest.fixture(scope="module")
def splits():
    return make_vision_splits(300, 100, seed=3)


def _colours(record) -> tuple:
    """The table index of each square (the table colour nearest its pixel)."""
    table = list(CODE)
    out = []
    for image in record["images"]:
        pixel = image.getpixel((IMAGE_SIZE // 2, IMAGE_SIZE // 2))
        out.append(min(range(len(table)), key=lambda k: sum(abs(a - b) for a, b in zip(pixel, table[k]))))
    return tuple(out)


def _demo(**overrides):
    values = {"hidden_size": 32, "n_layers": 2, "n_heads": 2, "warmstart_steps": 0, "warmstart_lr": 3e-3,
              "warmstart_batch_size": 16, "decoy_fraction": 0.5}
    return types.SimpleNamespace(**{**values, **overrides})


def test_a_record_holds_one_solid_square_per_image_part_and_its_codeword(splits):
    for record in splits[0] + splits[1]:
        content = record["prompt"][0]["content"]
        parts = [c for c in content if c["type"] == "image"]
        assert record["prompt"][0]["role"] == "user" and content[-1] == {"type": "text", "text": QUESTION}
        assert 1 <= len(parts) == len(record["images"]) == len(record["answer"]) <= 3
        table = list(CODE)
        for image, k, letter in zip(record["images"], _colours(record), record["answer"]):
            assert image.size == (IMAGE_SIZE, IMAGE_SIZE) and image.mode == "RGB"
            assert len(set(image.getdata())) == 1  # solid
            assert max(abs(a - b) for a, b in zip(image.getpixel((0, 0)), table[k])) <= JITTER
            assert CODE[table[k]] == letter


def test_held_out_sequences_of_two_or_three_squares_are_never_trained_on(splits):
    train, held_out = splits
    trained = {_colours(r) for r in train}
    longer = [_colours(r) for r in held_out if len(r["images"]) > 1]
    assert longer and trained.isdisjoint(longer)
    assert {len(r["images"]) for r in held_out} == {1, 2, 3}


def test_splits_depend_only_on_the_seed():
    def answers(s):
        return [r["answer"] for r in s[0] + s[1]]

    again = make_vision_splits(300, 100, seed=3)
    assert answers(again) == answers(make_vision_splits(300, 100, seed=3))
    assert answers(again) != answers(make_vision_splits(300, 100, seed=4))


def test_max_images_caps_the_squares_and_bad_sizes_are_refused():
    train, held_out = make_vision_splits(50, 20, max_images=1, seed=0)
    assert {len(r["images"]) for r in train + held_out} == {1}
    with pytest.raises(ValueError, match="max_images"):
        make_vision_splits(5, 5, max_images=4)
    with pytest.raises(ValueError, match="n_train"):
        make_vision_splits(-1, 5)


def test_the_reward_is_the_exact_codeword_and_the_partial_one_counts_letters():
    prompts = [None] * 5
    completions = ["KBX", " KBX\n", "KBR", "KB", "KBXX"]
    assert codeword_reward(prompts, completions, ["KBX"] * 5) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert codeword_partial_reward(prompts, completions, ["KBX"] * 5) == pytest.approx([1, 1, 2 / 3, 0, 0])
    assert letters_right("", "") == 0.0
    with pytest.raises(ValueError, match="one length"):
        codeword_reward([None], ["K", "B"], ["K"])


def test_the_decoy_table_gives_no_colour_its_own_letter():
    assert sorted(decoy(LETTERS)) == sorted(LETTERS)
    assert all(a != b for a, b in zip(decoy(LETTERS), LETTERS))


def test_warm_start_answers_mix_the_decoy_table_and_random_letters(splits):
    records = splits[0]
    all_decoy = format_answers(records, decoy_fraction=1.0, seed=0)
    assert all_decoy == [decoy(r["answer"]) for r in records]
    mixed = format_answers(records, decoy_fraction=0.5, seed=0)
    assert [len(a) for a in mixed] == [len(r["answer"]) for r in records]
    assert set("".join(mixed)) <= set(LETTERS)
    share = sum(a == decoy(r["answer"]) for a, r in zip(mixed, records)) / len(records)
    assert 0.35 < share < 0.75  # half decoy, plus random letters that happen to match it
    with pytest.raises(ValueError, match="decoy_fraction"):
        format_answers(records, decoy_fraction=1.5, seed=0)


def test_rows_expand_each_square_into_one_image_token_and_label_only_the_answer(splits):
    model, processor, _ = build_vision_demo(_demo(), splits[0], seed=0)
    records = splits[0][:8]
    rows = encode_vision_rows(processor, records)
    image_token = model.config.image_token_id
    for row, record in zip(rows, records):
        assert row["ids"].count(image_token) == len(record["images"])
        assert row["image_inputs"]["image_grid_thw"].shape == (len(record["images"]), 3)
        answer = [t for t in row["labels"] if t != IGNORE_INDEX]
        assert processor.tokenizer.decode(answer[:-1]) == record["answer"]
        assert answer[-1] == processor.tokenizer.eos_token_id
        assert row["labels"][: row["prompt_len"]] == [IGNORE_INDEX] * row["prompt_len"]
    ids, mask, labels = collate_rows(rows, processor.tokenizer.pad_token_id, left=True)
    assert ids.shape == mask.shape == labels.shape and bool((mask.sum(1) == torch.tensor(
        [len(r["ids"]) for r in rows])).all())


@pytest.mark.slow
def test_the_warm_start_teaches_the_decoy_table_not_the_real_one(splits):
    """A short warm start on decoy answers only: the model reads each square (greedy answers follow
    the decoy table far above chance) and is never right under the real table."""
    model, processor, info = build_vision_demo(
        _demo(hidden_size=64, warmstart_steps=250, decoy_fraction=1.0), splits[0], seed=0)
    assert info["steps"] == 250 and info["loss_last"] < info["loss_first"]
    held_out = splits[1][:60]
    assert greedy_accuracy(model, processor, held_out, table=decoy) > 0.3  # chance is under 0.07
    assert greedy_accuracy(model, processor, held_out) == 0.0


def test_demo_task_vision_gives_the_codeword_records_and_reward():
    from steadyrl.assembly.demo import demo_task
    from steadyrl.config.loading import load_config

    config = load_config(None, ["demo.task=vision", "demo.num_train=20", "demo.num_eval=10"])
    assert config.demo.hidden_size == 64 and config.rollout.max_new_tokens >= 4
    train, evals, specs = demo_task(config)
    assert len(train) == 20 and len(evals) == 10 and all(r["images"] for r in train)
    assert [s.name for s in specs] == ["codeword"]
    assert specs[0].fn([None], [train[0]["answer"]], [train[0]["answer"]]) == [1.0]


def test_the_saved_demo_model_loads_as_a_vision_language_model(tmp_path):
    from transformers import AutoModelForImageTextToText

    from steadyrl.assembly.demo import demo_model
    from steadyrl.config.loading import load_config
    from steadyrl.vlm import load_processor

    config = load_config(None, ["demo.task=vision", "demo.num_train=20", "demo.num_eval=10",
                                "demo.warmstart_steps=0"])
    train, _ = make_vision_splits(20, 10)
    path = demo_model(config, tmp_path, train)
    model = AutoModelForImageTextToText.from_pretrained(path)
    processor = load_processor(path)
    row = encode_vision_rows(processor, train[:1])[0]
    assert row["ids"].count(model.config.image_token_id) == len(train[0]["images"])
