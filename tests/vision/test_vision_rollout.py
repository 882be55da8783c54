"""Images through the rollout: the HF engine generates with each prompt's image inputs (token in,
token out), the vLLM engine sends the PIL images as multi-modal data (over a stand-in), and
``Generation.image_inputs`` stays aligned with its rows."""

from types import SimpleNamespace

import pytest
import torch
from support_vision_train import FAMILIES, IMAGE_TOKENS, image_prompt, square, text_prompt, tiny_vlm

from steadyrl.errors import ConfigError
from steadyrl.rollout import Generation
from steadyrl.rollout.base import concat_generations
from steadyrl.rollout.hf import HFEngine
from steadyrl.trainer.batch import batch_from_generation
from steadyrl.trainer.forward import response_logprobs
from steadyrl.vlm_inputs import (collate_image_inputs, image_metrics, image_token_count, image_token_id,
                                 repeat_image_inputs, token_aligned_inputs)


def _prompts(tok, processor):
    red = image_prompt(processor, [square((255, 0, 0))], "abc")
    blue = image_prompt(processor, [square((0, 0, 255), pattern=True)], "ab")
    return [red[0], blue[0], text_prompt(tok, "abcd")], [red[1], blue[1], None]


@pytest.mark.parametrize("family", FAMILIES)
def test_generation_with_images_keeps_the_expanded_image_tokens_and_each_rows_image_inputs(family):
    tok, model, processor = tiny_vlm(family)
    ids, inputs = _prompts(tok, processor)
    torch.manual_seed(0)
    gen = HFEngine(model, tok).generate(ids, 2, max_new_tokens=4, image_inputs=inputs)
    counts = image_token_count(model.config, gen.prompt_ids)
    assert counts.tolist() == [IMAGE_TOKENS[family]] * 4 + [0, 0]
    # token in, token out: each row's prompt is exactly its prompt's processor-expanded ids
    for row, prompt in enumerate([0, 0, 1, 1, 2, 2]):
        assert gen.prompt_ids[row][gen.prompt_mask[row].bool()].tolist() == ids[prompt]
    assert [x is inputs[p] for x, p in zip(gen.image_inputs, [0, 0, 1, 1, 2, 2]) if x is not None] == [True] * 4
    assert gen.image_inputs[4:] == [None, None]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_bfloat16_copys_rollout_logprobs_agree_with_the_trainers(family):
    tok, model, processor = tiny_vlm(family)
    ids, inputs = _prompts(tok, processor)
    torch.manual_seed(1)
    gen = HFEngine(model, tok, dtype=torch.bfloat16).generate(ids, 2, max_new_tokens=5, image_inputs=inputs)
    with torch.no_grad():
        trainer, _ = response_logprobs(model, batch_from_generation(gen), temperature=1.0)
    gap = ((trainer - gen.rollout_logprobs) * gen.response_mask).abs().max()
    assert 0 < gap < 0.03  # bfloat16 against float32, the same images on both sides


@pytest.mark.parametrize("family", FAMILIES)
def test_a_vlm_never_samples_its_image_placeholder(family):
    """A sampled placeholder is an image token with no image: the next forward over it fails.
    Unsuppressed, the random tiny models sample it within these 96 tokens (checked)."""
    tok, model, processor = tiny_vlm(family)
    ids, inputs = _prompts(tok, processor)
    torch.manual_seed(0)
    gen = HFEngine(model, tok).generate(ids, 4, max_new_tokens=8, image_inputs=inputs)
    assert int(image_token_count(model.config, gen.response_ids).sum()) == 0
    batch = batch_from_generation(gen)
    with torch.no_grad():
        response_logprobs(model, batch, temperature=1.0)  # the trainer's forward takes the sampled rows


def test_prefix_sharing_is_not_used_for_image_prompts_and_still_is_for_text(monkeypatch):
    import steadyrl.rollout.hf as hf

    tok, model, processor = tiny_vlm("llava")
    ids, inputs = _prompts(tok, processor)
    calls = []
    real = hf.prefill_once
    monkeypatch.setattr(hf, "prefill_once", lambda *a, **k: calls.append(a[1].shape) or real(*a, **k))
    HFEngine(model, tok, batch_size=2).generate(ids, 2, max_new_tokens=3, image_inputs=inputs)
    assert len(calls) == 1 and calls[0][0] == 1  # only the chunk of the text prompt shared its prefix


def test_qwen_vl_text_prompts_after_image_prompts_generate_with_their_own_positions():
    """Qwen-VL keeps the last forward's rope deltas: a text chunk continuing a shared prefix cache
    after an image chunk crashed (or, with as many rows, ran with the image rows' positions)."""
    tok, model, processor = tiny_vlm("qwen2_vl")
    ids, inputs = _prompts(tok, processor)
    torch.manual_seed(0)
    gen = HFEngine(model, tok, batch_size=2, dtype=torch.bfloat16).generate(ids, 2, max_new_tokens=3,
                                                                            image_inputs=inputs)
    with torch.no_grad():
        trainer, _ = response_logprobs(model, batch_from_generation(gen), temperature=1.0)
    assert ((trainer - gen.rollout_logprobs) * gen.response_mask).abs().max() < 0.03


def test_image_inputs_of_the_wrong_length_are_refused():
    tok, model, processor = tiny_vlm("llava")
    ids, inputs = _prompts(tok, processor)
    with pytest.raises(ValueError, match="image_inputs has 2 entries for 3 prompts"):
        HFEngine(model, tok).generate(ids, 1, max_new_tokens=2, image_inputs=inputs[:2])


def _gen(rows: int, inputs):
    return Generation(prompt_ids=torch.arange(rows).unsqueeze(1), prompt_mask=torch.ones(rows, 1, dtype=torch.long),
                      response_ids=torch.zeros(rows, 2, dtype=torch.long),
                      response_mask=torch.ones(rows, 2, dtype=torch.long), truncated=torch.zeros(rows, dtype=torch.bool),
                      completions=[""] * rows, image_inputs=inputs)


def test_select_and_concat_keep_image_inputs_with_their_rows():
    a, b = {"pixel_values": torch.zeros(1, 3)}, {"pixel_values": torch.ones(1, 3)}
    gen = _gen(3, [a, None, b])
    assert gen.select([2, 0]).image_inputs == [b, a]
    joined = concat_generations([gen, _gen(2, None), _gen(1, [a])], pad_id=0)
    assert joined.image_inputs == [a, None, b, None, None, a]  # the text-only part: None per row
    assert concat_generations([_gen(1, None), _gen(1, None)], pad_id=0).image_inputs is None
    assert "image_inputs" not in gen.encoded()  # the asynchronous worker (refused for VLMs) never sends them


def test_collate_concatenates_rows_in_order_and_refuses_mixed_processors():
    a = {"pixel_values": torch.zeros(4, 2), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    b = {"pixel_values": torch.ones(8, 2), "image_grid_thw": torch.tensor([[1, 2, 2], [1, 2, 2]])}
    out = collate_image_inputs([a, None, b])
    assert out["pixel_values"].shape == (12, 2) and out["pixel_values"][4:].eq(1).all()
    assert out["image_grid_thw"].shape == (3, 3)
    assert collate_image_inputs([None, None]) is None and collate_image_inputs(None) is None
    with pytest.raises(ValueError, match=r"row 1 have keys \['pixel_values'\], row 0's have"):
        collate_image_inputs([a, {"pixel_values": torch.zeros(1, 2)}])
    assert repeat_image_inputs([a, None], 2) == [a, a, None, None]


@pytest.mark.parametrize("family", FAMILIES)
def test_token_aligned_inputs_mark_the_image_tokens_for_qwen_vl_only(family):
    _, model, _ = tiny_vlm(family)
    token = image_token_id(model.config)
    ids = torch.tensor([[1, token, token, 9], [token, 9, 9, 9]])
    aligned = token_aligned_inputs(model.config, ids)
    if family == "qwen2_vl":
        assert aligned["mm_token_type_ids"].tolist() == [[0, 1, 1, 0], [1, 0, 0, 0]]
    else:
        assert aligned == {}
    gemma = SimpleNamespace(model_type="gemma3", image_token_index=7)
    assert token_aligned_inputs(gemma, torch.tensor([[7, 1]]))["token_type_ids"].tolist() == [[1, 0]]
    assert image_token_count(model.config, ids).tolist() == [2, 1]


def test_image_metrics_count_images_and_image_tokens_per_sample():
    _, model, processor = tiny_vlm("qwen2_vl")
    ids, inputs = image_prompt(processor, [square((1, 2, 3)), square((3, 2, 1))], "a")
    prompt = torch.tensor([ids, ids, [9] * len(ids)])
    out = image_metrics([inputs, inputs, None], prompt, model.config).merged()
    assert out["rollout/images_per_step"] == 4
    assert out["rollout/image_tokens_per_sample"] == pytest.approx(4 / 3)


def test_the_asynchronous_worker_is_refused_for_a_vlm():
    from steadyrl.run.asynchronous import start_rollouts

    _, model, _ = tiny_vlm("llava")
    config = SimpleNamespace(rollout=SimpleNamespace(asynchronous=SimpleNamespace(max_staleness=1)))
    run = SimpleNamespace(config=config, models=SimpleNamespace(policy=model))
    with pytest.raises(ConfigError, match="rollout.asynchronous.max_staleness = 1 with a vision-language model"):
        start_rollouts(run, None)


class ImageLLM:
    """``vllm.LLM``'s interface: records the prompts, answers two tokens per sample."""

    def __init__(self):
        self.requests = []

    def generate(self, requests, params, use_tqdm=False):
        self.requests.append(requests)
        done = SimpleNamespace(token_ids=[10, 11], finish_reason="stop",
                               logprobs=[{10: SimpleNamespace(logprob=-1.0)}, {11: SimpleNamespace(logprob=-2.0)}])
        return [SimpleNamespace(outputs=[done] * params.n) for _ in requests]


def _vllm_engine(tok):
    from steadyrl.rollout.vllm import VLLMEngine

    engine = VLLMEngine.__new__(VLLMEngine)  # no vllm, no GPU: the engine's own logic over the stand-in
    engine.llm, engine.tokenizer, engine.eos_ids = ImageLLM(), tok, [tok.eos_token_id]
    engine.sleep_mode, engine._stale, engine._asleep, engine._held = False, False, False, 0
    engine._sampling_params = lambda **kwargs: SimpleNamespace(**kwargs)
    return engine


def test_vllm_gets_token_ids_and_the_pil_images_and_returns_each_rows_image_inputs():
    tok, _, processor = tiny_vlm("qwen2_vl")
    ids, inputs = _prompts(tok, processor)
    images = [(square((255, 0, 0)),), (square((0, 0, 255), pattern=True),), ()]
    engine = _vllm_engine(tok)
    gen = engine.generate(ids, 2, max_new_tokens=2, image_inputs=inputs, images=images)
    sent = engine.llm.requests[0]
    assert [r["prompt_token_ids"] for r in sent] == ids
    assert sent[0]["multi_modal_data"]["image"] == [images[0][0]] and "multi_modal_data" not in sent[2]
    assert gen.image_inputs == [inputs[0], inputs[0], inputs[1], inputs[1], None, None]
    assert gen.rollout_logprobs[0].tolist() == [-1.0, -2.0]
    with pytest.raises(ValueError, match="prompt 0 has image inputs but no images"):
        engine.generate(ids, 1, max_new_tokens=2, image_inputs=inputs)


def test_a_vlm_steps_metrics_count_its_images_and_a_text_policys_have_none():
    from steadyrl.trainer.step import vision_metrics

    tok, model, processor = tiny_vlm("llava")
    ids, inputs = _prompts(tok, processor)
    gen = HFEngine(model, tok).generate(ids, 2, max_new_tokens=2, image_inputs=inputs)
    out = vision_metrics(SimpleNamespace(models=SimpleNamespace(policy=model)), gen)
    assert out == {"rollout/images_per_step": 4.0, "rollout/image_tokens_per_sample": pytest.approx(16 / 6)}
    text_policy = SimpleNamespace(config=SimpleNamespace(model_type="llama"))
    assert vision_metrics(SimpleNamespace(models=SimpleNamespace(policy=text_policy)), gen) == {}


def test_single_turn_episodes_pass_the_prompts_images_to_the_engine_and_text_prompts_pass_none():
    from steadyrl.rollout.episodes import TurnLimits, run_episodes

    tok, model, processor = tiny_vlm("qwen2_vl")
    ids, inputs = _prompts(tok, processor)
    images = [(square((255, 0, 0)),), (square((0, 0, 255), pattern=True),), ()]
    prompts = [SimpleNamespace(ids=i, image_inputs=x, images=im) for i, x, im in zip(ids, inputs, images)]
    limits = TurnLimits(max_turns=1, max_new_tokens=2, max_observation_tokens=8, observation_truncation="right",
                        episode_tokens=64)
    seen = []

    class Engine:
        def generate(self, prompt_ids, n, **kwargs):
            seen.append(kwargs)
            return HFEngine(model, tok).generate(prompt_ids, n, **kwargs)

    gen = run_episodes(Engine(), tok, prompts, 2, limits=limits, temperature=1.0)
    assert seen[0]["image_inputs"] == inputs and seen[0]["images"] == images
    assert gen.image_inputs == [inputs[0], inputs[0], inputs[1], inputs[1], None, None]
    run_episodes(Engine(), tok, [SimpleNamespace(ids=ids[2])], 1, limits=limits)  # a text run: no new kwargs
    assert "image_inputs" not in seen[1] and "images" not in seen[1]
