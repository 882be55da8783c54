"""Micro-batches by a token budget (``trainer.max_tokens_per_micro_batch``) instead of a row count.

With a fixed ``micro_batch_size`` a 20-token response shares its micro-batch, and so its padded
width, with a 2,000-token one. Here the rows of a (mini-)batch are sorted by their length (real
prompt tokens + response extent, longest first) and packed greedily: a row joins the current
micro-batch while ::

    rows * (longest prompt + longest response in the micro-batch) <= budget

and a row longer than the budget goes alone. Each micro-batch is then trimmed to its own
longest row (:func:`trim`): the prompt's left padding and the response's right padding columns
no row of the micro-batch uses are dropped. Position ids are stored per token, so the kept
tokens keep their positions; the dropped columns were masked out of attention and of every loss
and metric, so the numbers are those of the untrimmed rows (to float rounding).

The loss denominators are global over the mini-batch and the ranks
(:func:`~steadyrl.trainer.update.loss_denominators`), so which rows share a micro-batch does not
change the gradient: the token budget is a throughput setting, not a change to the algorithm.

Groups are not kept together: rows are sorted one by one, because the update's mini-batches
are shuffled across groups anyway whenever ``ppo_epochs > 1`` or there are several mini-batches.
Prefix sharing (:mod:`steadyrl.rollout.prefix`) does not need adjacent rows: it finds the rows
of a micro-batch that share a prompt wherever they are, so samples of one group that land in
the same micro-batch (similar lengths) still run their prompt once.

Padding-free rows (``trainer.padding_free``): the forward passes of a micro-batch run on one
row holding every sequence's real tokens back to back, with position ids restarting at 0 for
each sequence and no attention mask (:func:`pack_rows`). transformers then keeps the sequences
apart by itself: with ``flash_attention_2`` through the varlen kernel (``cu_seqlens`` from the
position ids), with ``sdpa`` / ``eager`` through a block-diagonal causal mask. No padding token
goes through the MLPs or the LM head; the hidden states at the response positions are gathered
back to ``[B, R]``. Whether a model's attention honours the restart is checked once at start-up
(:func:`check_padding_free`), since a model that ignores it would silently attend across
sequences. With ``max_tokens_per_micro_batch`` the budget then counts real tokens only.
"""

from __future__ import annotations

from dataclasses import fields, replace

import torch

from .. import distributed as dist
from ..errors import ConfigError
from ..models import lm_backbone_and_head
from .batch import RESPONSE, SEQUENCE, TrainBatch, layout_of, micro_batches


def row_extents(batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompt [B], response [B])`` columns each row needs: the prompt from its first real token
    (left padding), the response up to its last attended token (right padding; observations of
    a multi-turn episode included)."""
    p = batch.prompt_len
    prompt_mask = batch.attention_mask[:, :p].bool()
    response_mask = batch.attention_mask[:, p:].bool()
    cols_p = torch.arange(p, device=prompt_mask.device)
    first = torch.where(prompt_mask, cols_p, p).amin(-1) if p else torch.zeros(len(batch), dtype=torch.long)
    cols_r = torch.arange(1, response_mask.shape[1] + 1, device=response_mask.device)
    last = torch.where(response_mask, cols_r, 0).amax(-1) if response_mask.shape[1] else first * 0
    return p - first, last


def token_budget_batches(prompt: torch.Tensor, response: torch.Tensor, budget: int, *,
                         padding_free: bool = False) -> list[torch.Tensor]:
    """Row indices of each micro-batch: rows by length, longest first, packed greedily so that
    ``rows * (max prompt + max response) <= budget`` (padded rows) or ``sum of row lengths <= budget``
    (``padding_free``); a row over the budget alone."""
    order = torch.sort(prompt + response, descending=True, stable=True).indices.tolist()
    prompt, response = prompt.tolist(), response.tolist()
    out, current, max_p, max_r, total = [], [], 0, 0, 0
    for i in order:
        p, r = max(max_p, prompt[i]), max(max_r, response[i])
        cost = total + prompt[i] + response[i] if padding_free else (len(current) + 1) * (p + r)
        if current and cost > budget:
            out.append(torch.tensor(current))
            current, p, r, total = [], prompt[i], response[i], 0
        current.append(i)
        max_p, max_r, total = p, r, total + prompt[i] + response[i]
    if current:
        out.append(torch.tensor(current))
    return out


def trim(batch: TrainBatch) -> TrainBatch:
    """``batch`` without the padding columns none of its rows uses (at least one column each side):
    every ``SEQUENCE`` field loses the prompt's unused left columns and the response's unused right
    ones, every ``RESPONSE`` field the same right ones (the layouts :class:`TrainBatch` declares)."""
    prompt, response = row_extents(batch)
    p, full_r = batch.prompt_len, batch.response_len
    keep_p = max(int(prompt.max()), 1) if len(batch) else p
    keep_r = max(int(response.max()), 1) if len(batch) else full_r
    keep_p, keep_r = min(keep_p, p), min(keep_r, full_r)
    if (keep_p, keep_r) == (p, full_r):
        return batch
    columns = {SEQUENCE: slice(p - keep_p, p + keep_r), RESPONSE: slice(0, keep_r)}
    changes = {}
    for f in fields(batch):  # by declared layout: a new per-token field is narrowed with the others
        cut, value = columns.get(layout_of(f)), getattr(batch, f.name)
        if cut is not None and value is not None:
            changes[f.name] = value[:, cut]
    return replace(batch, **changes)


def split_to(parts: list[torch.Tensor], count: int) -> list[torch.Tensor]:
    """``parts`` with the largest ones halved until there are ``count`` (within the budget still:
    fewer rows, no wider). Possible whenever ``count`` <= the number of rows."""
    parts = list(parts)
    while len(parts) < count:
        i = max(range(len(parts)), key=lambda j: len(parts[j]))
        if len(parts[i]) < 2:
            raise ValueError(f"cannot split {sum(map(len, parts))} rows into {count} micro-batches")
        half = len(parts[i]) // 2
        parts[i : i + 1] = [parts[i][:half], parts[i][half:]]
    return parts


def micro_batch_plan(batch: TrainBatch, size: int, max_tokens: int | None, *,
                     padding_free: bool = False) -> list[tuple[torch.Tensor | slice, bool]]:
    """``(rows, trim)`` per micro-batch: ``micro_batch_size`` slices in order (``max_tokens`` None,
    today's split, untrimmed) or the token-budget packing, each micro-batch to be trimmed.

    With several data-parallel processes every one runs as many micro-batches as the one with the
    most (its largest ones halved): FSDP gathers the parameters in every forward, a collective
    that all processes must join. (Each process holds as many rows, so this always works.)"""
    if max_tokens is None:
        return [(rows, False) for rows in micro_batches(len(batch), size)]
    prompt, response = row_extents(batch)
    parts = token_budget_batches(prompt, response, max_tokens, padding_free=padding_free)
    if dist.world_size() > 1:
        parts = split_to(parts, int(dist.all_reduce_max(len(parts))))
    return [(rows, True) for rows in parts]


def padding_stats(batch: TrainBatch, plan: list[tuple[torch.Tensor | slice, bool]]) -> tuple[int, int]:
    """``(real tokens, padded tokens)`` the forward passes of ``plan`` process (for benchmarks)."""
    prompt, response = row_extents(batch)
    real, padded = int((prompt + response).sum()), 0
    for rows, trimmed in plan:
        n = len(range(len(batch))[rows]) if isinstance(rows, slice) else len(rows)
        width = int(prompt[rows].max() + response[rows].max()) if trimmed else batch.input_ids.shape[1]
        padded += n * width
    return real, padded


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
              prompt_len: int, response_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids [1, T], positions [1, T], index [B, R])``: the attended tokens of every row back to
    back (T = real tokens of the micro-batch) with their position ids, which must run 0, 1, ...
    within each row (they restart per sequence: that is what separates them), and for each
    response token the packed position of the hidden state that predicts it (the token before;
    0 where that token is padding: its log-prob is masked out anyway)."""
    keep = attention_mask.bool()
    expected = (keep.long().cumsum(-1) - 1)[keep]
    positions = position_ids[keep]
    if not torch.equal(positions, expected):
        raise ValueError("trainer.padding_free: the batch's position ids do not count 0, 1, ... over each "
                         "row's attended tokens, so packed sequences could not be told apart")
    flat = keep.reshape(-1).long().cumsum(0).reshape(keep.shape) - 1
    before = slice(prompt_len - 1, prompt_len - 1 + response_len)
    index = torch.where(keep[:, before], flat[:, before], torch.zeros_like(flat[:, before]))
    return input_ids[keep].unsqueeze(0), positions.unsqueeze(0), index


@torch.no_grad()
def check_padding_free(model, *, tolerance: float = 1e-3) -> None:
    """Refuse ``trainer.padding_free`` for a model whose attention does not keep packed sequences
    apart: two short random sequences run packed must give the hidden states they give alone."""
    parts = lm_backbone_and_head(model)
    net = parts[0] if parts is not None else model
    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().num_embeddings
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randint(0, vocab, (1, n), generator=gen).to(device) for n in (5, 3))

    def states(**kwargs):
        out = net(**kwargs, use_cache=False, output_hidden_states=parts is None)
        return (out.last_hidden_state if parts is not None else out.hidden_states[-1]).float()

    alone = torch.cat([states(input_ids=a), states(input_ids=b)], dim=1)
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2]], device=device)
    packed = states(input_ids=torch.cat([a, b], dim=1), position_ids=positions, attention_mask=None)
    gap = float((packed - alone).abs().max() / alone.abs().max().clamp_min(1e-6))
    if not gap <= tolerance:
        impl = getattr(model.config, "_attn_implementation", None)
        raise ConfigError(
            f"trainer.padding_free = true, but this model ({model.config.model_type}, attention "
            f"{impl!r}) attends across packed sequences (relative difference {gap:.3g} from running them "
            "apart); set trainer.padding_free=false, or a model / model.attn_implementation whose attention "
            "reads restarting position ids (flash_attention_2, sdpa or eager in transformers' current models)"
        )
