"""What :func:`gather_samples` takes from the batch is declared once, on :class:`GlobalSamples`'
fields (``BATCH`` / ``STEP``): the per-token fields come back in one process exactly as given, and a
field named like a TrainBatch per-token field cannot sit on GlobalSamples ungathered (it would be
None there, silently: on-policy distillation's teacher log-probs were such a field, listed by hand)."""

from dataclasses import fields, replace

import support
import torch

from steadyrl.rewards.scoring import ScoreResult
from steadyrl.rollout import Generation
from steadyrl.trainer.batch import RESPONSE, TrainBatch, layout_of
from steadyrl.trainer.global_batch import BATCH, PER_TOKEN, STEP, GlobalSamples, gather_samples

PER_TOKEN_BATCH_FIELDS = {f.name for f in fields(TrainBatch) if layout_of(f) == RESPONSE}


def test_every_field_declares_where_it_comes_from():
    sources = {f.name: f.metadata.get("source") for f in fields(GlobalSamples)}
    assert set(sources.values()) <= {BATCH, STEP}, sources
    assert PER_TOKEN == tuple(name for name, source in sources.items() if source == BATCH)


def test_what_is_gathered_from_the_batch_is_a_per_token_batch_field():
    assert set(PER_TOKEN) <= PER_TOKEN_BATCH_FIELDS, set(PER_TOKEN) - PER_TOKEN_BATCH_FIELDS


def test_a_field_named_like_a_per_token_batch_field_is_gathered_from_it():
    """``selected`` is the one exception: dynamic sampling's [N] row mask, not the token selection
    (which is made per mini-batch, after the gather)."""
    same_name = {f.name for f in fields(GlobalSamples)} & PER_TOKEN_BATCH_FIELDS
    assert same_name - {"selected"} == set(PER_TOKEN)


def test_one_process_gets_every_per_token_field_back_as_given():
    batch = support.tiny_batch(seed=3, rows=8, response=6)
    g = torch.Generator().manual_seed(0)
    filled = {name: torch.randn(8, 6, generator=g) for name in PER_TOKEN if getattr(batch, name) is None}
    batch = replace(batch, **filled)
    p = batch.prompt_len
    gen = Generation(prompt_ids=batch.input_ids[:, :p], prompt_mask=batch.attention_mask[:, :p],
                     response_ids=batch.response_ids, response_mask=batch.response_mask,
                     truncated=torch.zeros(8, dtype=torch.bool), completions=[""] * 8)
    result = ScoreResult(names=["r"], weights={"r": 1.0}, raw={"r": [1.0] * 8}, scores=torch.ones(8),
                         valid=torch.ones(8, dtype=torch.bool), failures={"r": {}})
    whole = gather_samples(result, gen, batch, [p] * 2)
    for name in PER_TOKEN:
        assert getattr(batch, name) is not None, name
        assert torch.equal(whole.mine(getattr(whole, name)), getattr(batch, name)), name
