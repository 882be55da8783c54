"""A Generation's fields are row-aligned and declared so: select, concatenation and the asynchronous
worker's encoding go over every field, so a new per-row input is one field."""

from dataclasses import fields

import torch

from steadyrl.rollout.base import ITEMS, PROMPT, RESPONSE, ROW, Generation, concat_generations


def _gen(rows: int, p: int, r: int, *, policy_mask: bool = False, episodes: bool = False, first: int = 0):
    ids = torch.arange(first, first + rows * r).reshape(rows, r) + 10
    return Generation(prompt_ids=torch.full((rows, p), 7), prompt_mask=torch.ones(rows, p, dtype=torch.long),
                      response_ids=ids, response_mask=torch.ones(rows, r, dtype=torch.long),
                      truncated=torch.tensor([i % 2 == 0 for i in range(rows)]),
                      completions=[f"c{first + i}" for i in range(rows)],
                      policy_mask=torch.zeros(rows, r, dtype=torch.long) if policy_mask else None,
                      episodes=[f"e{first + i}" for i in range(rows)] if episodes else None)


def test_every_field_declares_how_it_is_aligned_with_the_rows():
    assert {f.metadata["layout"] for f in fields(Generation)} <= {PROMPT, RESPONSE, ROW, ITEMS}


def test_select_picks_the_same_rows_of_every_field():
    gen = _gen(4, 2, 3, policy_mask=True, episodes=True)
    picked = gen.select([3, 1])
    assert picked.completions == ["c3", "c1"] and picked.episodes == ["e3", "e1"]
    assert torch.equal(picked.response_ids, gen.response_ids[[3, 1]])
    assert torch.equal(picked.truncated, gen.truncated[[3, 1]]) and picked.rollout_logprobs is None
    assert torch.equal(picked.policy_mask, gen.policy_mask[[3, 1]])


def test_concatenation_pads_each_layout_and_fills_a_policy_mask_a_part_lacks():
    a, b = _gen(2, 2, 3, policy_mask=True, episodes=True), _gen(1, 4, 5, first=100)
    joined = concat_generations([a, b], pad_id=0)
    assert joined.prompt_ids.shape == (3, 4) and joined.response_ids.shape == (3, 5)
    assert joined.prompt_mask[0].tolist() == [0, 0, 1, 1]  # prompts left-padded
    assert joined.response_mask[0].tolist() == [1, 1, 1, 0, 0]  # responses right-padded
    assert joined.policy_mask[:2].sum() == 0 and joined.policy_mask[2].tolist() == [1] * 5  # b's: all the policy's
    assert joined.completions == ["c0", "c1", "c100"] and joined.episodes is None  # b has no episodes
    assert joined.truncated.tolist() == [True, False, True]


def test_the_worker_sends_the_single_turn_fields_and_they_rebuild_the_generation():
    gen = _gen(2, 2, 3)
    sent = gen.encoded()
    assert set(sent) == {"prompt_ids", "prompt_mask", "response_ids", "response_mask", "truncated", "completions",
                         "rollout_logprobs"}
    back = Generation(**sent)
    assert back.completions == gen.completions and torch.equal(back.response_ids, gen.response_ids)
