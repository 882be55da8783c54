"""The pre-flight doctor's model of the rollout engine: how it holds the policy and what log-probs
it assigns to the tokens it sampled, so that one factor at a time can be set to the trainer's.

An :class:`EngineSpec` is everything on the engine's side that can make its numbers differ from the
trainer's: its precision (``rollout.dtype``), its attention implementation, the side it pads prompts
on, its weights (a copy that may not have been refreshed: stale), the sampling processors
(temperature, top-k, top-p) and which log-probs it *reports*: ``"processed"`` (of the distribution it
samples from, after top-k / top-p, as vLLM's ``processed_logprobs``) or ``"unprocessed"``
(``log softmax(logits / temperature)`` over the whole vocabulary, as the HF engine's ``rollout.dtype``
copy reports them).

:func:`behaviour_logprobs` runs one teacher-forced forward pass of the engine's model over the sampled
sequences, laid out as the engine lays them out, and returns each sampled token's log-prob under the
distribution it was really sampled from (``softmax`` of the processed logits) and the log-probs the
engine reports. The trainer's side is the trainer's own forward (steadyrl.trainer.forward).
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, replace

import torch

from ..functional.constants import LOGPROB_DIFF_CLAMP

REPORTED = ("processed", "unprocessed")
"""What an engine's log-probs can be of (EngineSpec.reported)."""


@dataclass(frozen=True)
class EngineSpec:
    dtype: torch.dtype
    attn: str | None
    padding_side: str
    reported: str
    temperature: float
    top_p: float
    top_k: int

    def __post_init__(self) -> None:
        if self.reported not in REPORTED:
            raise ValueError(f"EngineSpec.reported = {self.reported!r}: valid: {', '.join(REPORTED)}")

    def with_(self, **changes) -> EngineSpec:
        return replace(self, **changes)

    @property
    def truncates(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0


def checksum(model: torch.nn.Module, dtype: torch.dtype | None = None) -> str:
    """A short digest of the model's weights, each cast to ``dtype`` (default: as they are) and then
    to float32, one tensor at a time (no copy of the model)."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        t = p.detach() if dtype is None or not p.is_floating_point() else p.detach().to(dtype)
        h.update(t.to(torch.float32).contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:12]


def weights_match(engine_model: torch.nn.Module, trainer_model: torch.nn.Module) -> tuple[bool, str, str]:
    """``(equal, engine digest, trainer digest)``: the trainer's weights are cast to the engine's
    dtype first, so a precision difference alone is not called stale."""
    a = checksum(engine_model)
    b = checksum(trainer_model, next(engine_model.parameters()).dtype)
    return a == b, a, b


def engine_model(trainer_model: torch.nn.Module, spec: EngineSpec, weights: torch.nn.Module | None = None):
    """The engine's copy of the policy: ``weights`` (or the trainer's) in ``spec.dtype`` with
    ``spec.attn``; never the trainer's module itself, which stays untouched."""
    model = copy.deepcopy(weights if weights is not None else trainer_model).to(spec.dtype)
    if spec.attn is not None:
        model.config._attn_implementation = spec.attn
    model.requires_grad_(False)
    return model.eval()


def _layout(prompt_ids, prompt_mask, response_ids, response_mask, side: str):
    """``(input_ids, attention_mask, position_ids, response start per row)``: prompts padded on
    ``side`` (left: as the trainer and generate lay them out; right: padding between prompt and
    response, as a right-padding engine would), responses after them."""
    if side == "left":
        ids = torch.cat([prompt_ids, response_ids], 1)
        mask = torch.cat([prompt_mask, response_mask.to(prompt_mask.dtype)], 1)
        starts = torch.full((ids.shape[0],), prompt_ids.shape[1], dtype=torch.long)
    else:
        rows, masks = [], []
        for p, pm, r, rm in zip(prompt_ids, prompt_mask, response_ids, response_mask):
            real = p[pm.bool()]
            pad = p.new_zeros(p.shape[0] - real.shape[0])  # masked out: its value is never seen
            rows.append(torch.cat([real, pad, r]))
            masks.append(torch.cat([torch.ones_like(real), torch.zeros_like(pad), rm.to(p.dtype)]))
        ids, mask = torch.stack(rows), torch.stack(masks)
        starts = torch.full((ids.shape[0],), prompt_ids.shape[1], dtype=torch.long)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions, starts


def _process(logits: torch.Tensor, spec: EngineSpec) -> torch.Tensor:
    """The sampler's scores: logits / temperature, then top-k and top-p as transformers applies them."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    scores = logits / spec.temperature
    flat = scores.reshape(-1, scores.shape[-1])
    if spec.top_k > 0:
        flat = TopKLogitsWarper(top_k=spec.top_k)(None, flat)
    if spec.top_p < 1.0:
        flat = TopPLogitsWarper(top_p=spec.top_p)(None, flat)
    return flat.reshape(scores.shape)


@torch.no_grad()
def behaviour_logprobs(model, gen, spec: EngineSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """``(behaviour [B, R], reported [B, R])`` float32, 0 on padding: each sampled token's log-prob
    under the distribution the engine samples from, and under the one it reports (a VLM's rows
    with their images, as the trainer feeds them)."""
    from ..vlm_inputs import collate_image_inputs, model_image_kwargs

    ids, mask, positions, starts = _layout(gen.prompt_ids, gen.prompt_mask, gen.response_ids, gen.response_mask,
                                           spec.padding_side)
    r = gen.response_ids.shape[1]
    device = next(model.parameters()).device
    ids = ids.to(device)
    extra = model_image_kwargs(model.config, ids, collate_image_inputs(gen.image_inputs), positions.to(device),
                               next(model.parameters()).dtype)
    logits = model(input_ids=ids, attention_mask=mask.to(device), use_cache=False, **extra).logits
    logits = logits[:, int(starts[0]) - 1: int(starts[0]) - 1 + r].float().cpu()
    labels = gen.response_ids.unsqueeze(-1)
    sampled = torch.log_softmax(_process(logits, spec), -1).gather(-1, labels).squeeze(-1)
    full = torch.log_softmax(logits / spec.temperature, -1).gather(-1, labels).squeeze(-1)
    reported = sampled if spec.reported == "processed" else full
    valid = gen.response_mask.bool()
    zero = torch.zeros((), dtype=sampled.dtype)
    return torch.where(valid, sampled, zero), torch.where(valid, reported, zero)


def gap(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean absolute per-token log-ratio ``|a - b|`` over ``mask`` (each clamped to 40, seed 002)."""
    d = (a.double() - b.double()).nan_to_num(nan=LOGPROB_DIFF_CLAMP).abs().clamp(max=LOGPROB_DIFF_CLAMP)
    m = mask.bool()
    return float(d[m].mean()) if m.any() else 0.0
