"""The pre-flight's attribution: the engine's side rescored with one factor set to the trainer's at a
time (sampling processors, precision, attention, padding side, weights), the template round trip, and
the ranked causes with their share of the gap and the config change that removes each."""

from __future__ import annotations

import torch

from ..functional.mismatch import mismatch_metrics
from .engine_side import engine_model, weights_match
from .preflight import TOLERANCE, Cause, Preflight, _gap_sum, _Side
from .roundtrip import round_trip

_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float64: "float64"}


def _dtype(model) -> torch.dtype:
    return next(model.parameters()).dtype


def _factors(side: _Side) -> list[tuple[str, str, object, object, str, str]]:
    """``(name, title, model, spec, evidence, change)`` for every factor where the engine differs from
    the trainer: the engine's side with that one factor set to the trainer's."""
    spec, eng, cfg = side.spec, side.engine, side.config
    out = []
    if spec.truncates:
        processed = "reports them" if spec.reported == "processed" else "reports the untruncated ones"
        out.append(("sampling", "Sampling parameters (top-k / top-p)", eng, spec.with_(top_k=0, top_p=1.0),
                    f"the engine samples from softmax(logits / {spec.temperature:g}) truncated by top_k={spec.top_k}, "
                    f"top_p={spec.top_p:g} and {processed}; the trainer's log-probs are of the whole softmax",
                    f"rollout.top_k=0 rollout.top_p=1.0 (now {spec.top_k}, {spec.top_p:g}): sample from the "
                    "distribution the trainer scores"))
    trainer_dtype = _dtype(side.trainer)
    if spec.dtype != trainer_dtype:
        same = weights_match(side.engine, side.trainer)[0]  # the trainer's own weights, unless they are stale
        source = side.trainer if same else side.engine
        out.append(("precision", "Precision (engine dtype)", engine_model(source, spec.with_(dtype=trainer_dtype)),
                    spec, f"the engine computes in {_NAMES.get(spec.dtype)}, the trainer in {_NAMES.get(trainer_dtype)}",
                    f"rollout.dtype=null (now {getattr(cfg.rollout, 'dtype', None)}): the engine samples in the "
                    f"trainer's model.dtype; or keep it and correct the gap (docs/stability.md)"))
    trainer_attn = getattr(side.trainer.config, "_attn_implementation", None)
    if spec.attn != trainer_attn:
        out.append(("attention", "Attention implementation", engine_model(side.engine, spec.with_(attn=trainer_attn)),
                    spec, f"the engine attends with {spec.attn}, the trainer with {trainer_attn}",
                    f"the same kernel on both sides: model.attn_implementation={trainer_attn} for the engine too"))
    if spec.padding_side != "left":
        out.append(("padding", "Padding side", eng, spec.with_(padding_side="left"),
                    f"the engine pads prompts on the {spec.padding_side}, the trainer on the left",
                    "pad prompts on the left for generation (tokenizer.padding_side = 'left')"))
    same, a, b = weights_match(side.engine, side.trainer)
    if not same:
        out.append(("stale_weights", "Stale weights (engine != trainer)", engine_model(side.trainer, spec), spec,
                    f"checksum of the engine's weights {a} != the trainer's {b} (cast to the engine's dtype)",
                    "push the trainer's weights to the engine after every update (engine.update_weights) "
                    "before it samples again"))
    return out


def _round_trip_cause(side: _Side) -> tuple[Cause | None, str, object]:
    from ..rollout import eos_token_ids

    eos = set(eos_token_ids(side.tokenizer, side.trainer))
    trips = [round_trip(side.trainer, side.tokenizer, g, side.chats[i * len(g): (i + 1) * len(g)], eos)
             for i, g in enumerate(side.gens)]
    changed, samples = sum(t.changed for t in trips), sum(t.samples for t in trips)
    gap = sum(t.gap * t.samples for t in trips) / max(samples, 1)  # gap is per token: weight by batch
    example = next((t.example for t in trips if t.example), None)
    if not changed:
        return None, f"template round trip ({samples} of {samples} samples re-encode to the sampled ids)", None
    shown = ""
    if example is not None:
        sampled, again = example
        i = next((k for k, (x, y) in enumerate(zip(sampled, again)) if x != y), min(len(sampled), len(again)))
        shown = (f"; first: sampled {sampled[i:i + 4]} ({side.tokenizer.decode(sampled[i:i + 4])!r}) "
                 f"re-encode as {again[i:i + 4]}")
    cause = Cause("template", "Chat-template round trip", gap,
                  f"{changed} of {samples} samples do not come back as the sampled ids when their text is "
                  f"rendered and encoded again{shown}",
                  "keep token ids end to end (steadyrl's episodes do; a gateway or a re-tokenizing trainer does "
                  "not), or fix data.chat_template / the tokenizer so the sampled turn renders back to its ids")
    return cause, "", trips


def attribute(side: _Side, tolerance: float = TOLERANCE, setup: str = "") -> Preflight:
    """Measure, attribute and rank (module docstring)."""
    total, n = _gap_sum(side, side.engine, side.spec)
    baseline = total / max(n, 1)
    shown_total, _ = _gap_sum(side, side.engine, side.spec, reported=True)
    causes, ruled_out = [], []
    for name, title, model, spec, evidence, change in _factors(side):
        without = _gap_sum(side, model, spec)[0] / max(n, 1)
        cause = Cause(name, title, max(baseline - without, 0.0),
                      f"{evidence}; the gap falls from {baseline:.4g} to {without:.4g} without it", change)
        (causes if cause.gap >= tolerance else ruled_out).append(cause if cause.gap >= tolerance else
                                                                 f"{title.lower()} (removes {cause.gap:.2g})")
    explained = sum(c.gap for c in causes)
    if baseline - explained >= tolerance:
        causes.append(Cause("unexplained", "Not explained by one factor", baseline - explained,
                            "what remains when each factor alone is set to the trainer's (factors that act "
                            "together, or kernels that differ)", "set the factors above together, or correct the "
                            "gap (docs/stability.md)"))
    trip, trip_ok, _ = _round_trip_cause(side)
    if trip is not None and trip.gap >= tolerance:
        causes.append(trip)
    elif trip is not None:
        ruled_out.append(f"template round trip (changes samples but only {trip.gap:.2g} per token)")
    else:
        ruled_out.append(trip_ok)
    whole = sum(c.gap for c in causes)
    for c in causes:
        c.share = c.gap / whole if whole > 0 else 0.0
    causes.sort(key=lambda c: -c.gap)
    spec = side.spec
    for name, present in (("sampling parameters (no top-k / top-p)", not spec.truncates),
                          ("precision (same dtype)", spec.dtype == _dtype(side.trainer)),
                          ("padding side (left)", spec.padding_side == "left"),
                          ("stale weights (checksums equal)", weights_match(side.engine, side.trainer)[0])):
        if present:
            ruled_out.append(name)
    return Preflight(setup=setup, tokens=n, baseline=baseline, metrics=_metrics(side),
                     reported=f"{spec.reported}: mean |log-ratio| {shown_total / max(n, 1):.4g} per token",
                     causes=causes, ruled_out=ruled_out, tolerance=tolerance)


def _metrics(side: _Side) -> dict[str, float]:
    """:func:`~steadyrl.functional.mismatch_metrics` of the engine's reported log-probs against the
    trainer's over every sampled token (all batches together)."""
    from .engine_side import behaviour_logprobs

    width = max(g.response_ids.shape[1] for g in side.gens)
    pad = lambda t: torch.nn.functional.pad(t.float(), (0, width - t.shape[1]))  # noqa: E731
    shown = [behaviour_logprobs(side.engine, g, side.spec)[1] for g in side.gens]
    metrics = mismatch_metrics(torch.cat([pad(t) for t in side.trainer_logprobs]), torch.cat([pad(t) for t in shown]),
                               torch.cat([pad(g.response_mask) for g in side.gens]), prefix="")
    return {k: float(v) for k, v in metrics.items() if k in ("k1", "k3", "ppl_ratio", "ess", "ratio_max", "ratio_min")}
