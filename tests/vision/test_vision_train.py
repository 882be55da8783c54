"""Images through training: the trainer's log-probs of rows with images are those of a plain model
forward with the processor's inputs, on both tiny families and every log-prob path; image inputs
stay with their rows through every row selection; the gradient reaches the language model and not
a frozen vision tower."""

import pytest
import torch
from support_vision_train import FAMILIES, image_prompt, plain_logprobs, square, text_prompt, tiny_vlm

from steadyrl.rollout import Generation
from steadyrl.trainer.batch import batch_from_generation
from steadyrl.trainer.forward import response_logprobs
from steadyrl.trainer.packing import trim
from steadyrl.trainer.step import _per_token

IMPLS = ("fused", "chunked_grad", "naive")


def _generation(tok, rows: list[tuple[list[int], dict | None, str]]) -> Generation:
    """Rows of (prompt ids, image inputs, response text): prompts left-padded, responses right-padded
    (each ends with EOS), laid out as the engine lays them out."""
    pad = tok.pad_token_id
    responses = [tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for _, _, text in rows]
    p, r = max(len(ids) for ids, _, _ in rows), max(len(x) for x in responses)
    prompt_ids = torch.full((len(rows), p), pad)
    prompt_mask = torch.zeros((len(rows), p), dtype=torch.long)
    response_ids = torch.full((len(rows), r), pad)
    response_mask = torch.zeros((len(rows), r), dtype=torch.long)
    for i, ((ids, _, _), resp) in enumerate(zip(rows, responses)):
        prompt_ids[i, p - len(ids):], prompt_mask[i, p - len(ids):] = torch.tensor(ids), 1
        response_ids[i, : len(resp)], response_mask[i, : len(resp)] = torch.tensor(resp), 1
    inputs = [x for _, x, _ in rows]
    return Generation(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                      response_mask=response_mask, truncated=torch.zeros(len(rows), dtype=torch.bool),
                      completions=[t for _, _, t in rows],
                      image_inputs=inputs if any(x is not None for x in inputs) else None)


def _mixed(family):
    """A model and a batch of image rows (each its own images, two in one row) and text rows."""
    tok, model, processor = tiny_vlm(family)
    red = image_prompt(processor, [square((255, 0, 0))], "abc")
    blue = image_prompt(processor, [square((0, 0, 255), pattern=True)], "abc")  # same text: only the image differs
    two = image_prompt(processor, [square((0, 255, 0)), square((90, 30, 200), pattern=True)], "a")
    text = text_prompt(tok, "abcdef")
    rows = [(red[0], red[1], "dead"), (blue[0], blue[1], "dead"), (text, None, "bee"), (blue[0], blue[1], "cab"),
            (two[0], two[1], "ace"), (red[0], red[1], "cab"), (text, None, "fig")]
    return tok, model, batch_from_generation(_generation(tok, rows))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("impl", IMPLS)
def test_trainer_logprobs_of_a_mixed_batch_equal_a_plain_forward_of_each_row(family, impl):
    _, model, batch = _mixed(family)
    with torch.no_grad():
        logp, _ = response_logprobs(model, batch, temperature=1.0, impl=impl)
        for row in range(len(batch)):
            torch.testing.assert_close(logp[row] * batch.response_mask[row], plain_logprobs(model, batch, row),
                                       rtol=0, atol=2e-5)
    # the images matter: rows 0 and 1 (same prompt text and response, other image) differ
    assert (logp[0] - logp[1]).abs().max() > 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_share_prefix_and_padding_free_with_images_still_give_the_plain_numbers(family):
    _, model, batch = _mixed(family)
    with torch.no_grad():
        plain, _ = response_logprobs(model, batch, temperature=1.0, share_prefix=False, padding_free=False)
        for share, packed in ((True, False), (False, True), (True, True)):
            got, _ = response_logprobs(model, batch, temperature=1.0, share_prefix=share, padding_free=packed)
            torch.testing.assert_close(got, plain, rtol=0, atol=1e-5)
        text = batch.select(torch.tensor([2, 6]))  # a text-only micro-batch of a VLM: sharing still on
        torch.testing.assert_close(response_logprobs(model, text, temperature=1.0, share_prefix=True)[0],
                                   plain[[2, 6]], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_micro_batches_keep_each_rows_images(family):
    """Rows selected in another order, trimmed, or split by a token budget (which sorts rows by
    length) read their own images: a mix-up would give rows 0 and 1 (the same text, another image)
    each other's log-probs."""
    _, model, batch = _mixed(family)
    with torch.no_grad():
        whole, _ = response_logprobs(model, batch, temperature=1.0)
        order = torch.tensor([3, 1, 0, 6, 4])
        picked = batch.select(order)
        assert picked.image_inputs == [batch.image_inputs[i] for i in order.tolist()]
        torch.testing.assert_close(response_logprobs(model, trim(picked), temperature=1.0)[0],
                                   whole[order][:, : trim(picked).response_len], rtol=0, atol=1e-5)
        torch.testing.assert_close(response_logprobs(model, batch.select(slice(1, 4)), temperature=1.0)[0],
                                   whole[1:4], rtol=0, atol=1e-5)
        fn = lambda m: response_logprobs(model, m, temperature=1.0)[0]  # noqa: E731
        for size, budget in ((2, None), (3, 60)):
            per_token = _per_token(fn, batch, size, torch.device("cpu"), budget)
            mask = batch.response_mask  # a trimmed micro-batch leaves 0 past its longest row
            torch.testing.assert_close(per_token * mask, whole * mask, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_reaches_the_language_model_and_not_a_frozen_vision_tower(family):
    _, model, batch = _mixed(family)
    tower = model.model.visual if family == "qwen2_vl" else model.model.vision_tower
    tower.requires_grad_(False)
    model.train()
    logp, _ = response_logprobs(model, batch, temperature=1.0)
    (logp * batch.response_mask).sum().backward()
    assert all(p.grad is None for p in tower.parameters())
    language = model.model.language_model
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in language.layers[0].parameters()
               if p.requires_grad)
    if family == "llava":  # the projector between the frozen tower and the language model learns
        assert all(p.grad is not None for p in model.model.multi_modal_projector.parameters())


def test_float64_logprobs_with_images_equal_the_plain_forward_tightly():
    _, model, batch = _mixed("qwen2_vl")
    model = model.double()
    with torch.no_grad():
        logp, _ = response_logprobs(model, batch, temperature=1.0)
        for row in range(len(batch)):
            torch.testing.assert_close(logp[row].double() * batch.response_mask[row],
                                       plain_logprobs(model, batch, row).double(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_prepare_and_the_update_read_each_rows_images_through_shuffled_mini_and_micro_batches(family):
    """``prepare``'s old and reference log-probs (token-budget micro-batches, rows re-ordered by
    length) and the update's (shuffled mini-batches of two epochs) see the same images per row:
    at lr 0 every ratio is exactly 1 and the KL to the reference (the same weights) is 0."""
    import copy

    from steadyrl.config import load_config
    from steadyrl.trainer.parts import RunModels
    from steadyrl.trainer.step import prepare
    from steadyrl.trainer.update import ppo_update

    tok, model, batch = _mixed(family)
    config = load_config(None, ["trainer.device=cpu", "algorithm.kl_mode=loss", "trainer.ppo_epochs=2",
                                "trainer.mini_batch_size=4", "trainer.micro_batch_size=2",
                                "trainer.max_tokens_per_micro_batch=80"])
    models = RunModels(tokenizer=tok, policy=model, reference=copy.deepcopy(model), critic=None)
    batch = prepare(config, models, torch.device("cpu"), 0.1, batch)
    with torch.no_grad():
        whole, _ = response_logprobs(model, batch, temperature=1.0)
    mask = batch.response_mask
    torch.testing.assert_close(batch.old_logprobs * mask, whole * mask, rtol=0, atol=1e-5)
    torch.testing.assert_close(batch.ref_logprobs * mask, whole * mask, rtol=0, atol=1e-5)
    batch.loss_mask, batch.advantages = mask, torch.randn(mask.shape)
    metrics, steps, _ = ppo_update(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, config,
                                   kl_coef=0.1, device=torch.device("cpu"))
    assert steps == 4
    assert metrics["actor/ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["actor/ratio_min"] == pytest.approx(1.0, abs=1e-4)
